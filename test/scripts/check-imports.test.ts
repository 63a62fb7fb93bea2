// The import rules `npm run lint` enforces (scripts/check-imports.ts): no import cycle, type-only imports included,
// and a domain of src/ imported from outside only through its index.ts. Shown on a made-up tree, then on this repo.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { check } from '../../scripts/check-imports.ts'

async function tree (files: Record<string, string>): Promise<string> {
  const root = await mkdtemp(join(tmpdir(), 'meshnode-imports-'))
  for (const [path, text] of Object.entries(files)) {
    await mkdir(dirname(join(root, path)), { recursive: true })
    await writeFile(join(root, path), text)
  }
  await mkdir(join(root, 'dashboard', 'src'), { recursive: true })
  return root
}

test('a new cycle, a type-only one included, and a domain imported around its index.ts are each a violation', async (t) => {
  const root = await tree({
    'src/alpha/index.ts': "export { a } from './a.ts'\n",
    'src/alpha/a.ts': "import type { B } from './b.ts'\nexport const a = 1\nexport type A = B\n",
    'src/alpha/b.ts': "import type { A } from './a.ts'\nexport type B = A | number\n",
    'src/beta/index.ts': "export { c } from './c.ts'\n",
    'src/beta/c.ts': "import { a } from '../alpha/a.ts'\nexport const c = a\n",
    'src/gamma/index.ts': "import { c } from '../beta/index.ts'\nexport const g = c\n"
  })
  t.after(() => rm(root, { recursive: true, force: true }))
  assert.deepEqual(check(root), [
    'import cycle: src/alpha/a.ts -> src/alpha/b.ts',
    "src/beta/c.ts imports src/alpha/a.ts around its domain's index.ts"
  ])
})

test('this repository keeps both rules', () => {
  assert.deepEqual(check(join(import.meta.dirname, '..', '..')), [])
})
