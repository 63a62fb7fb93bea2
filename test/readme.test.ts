// The README's first steps are commands people paste: they must name things that exist.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { findCatalogEntry } from '../src/models/index.ts'
import { buildProgram } from '../src/cli/program.ts'

const readme = readFileSync(join(import.meta.dirname, '..', 'README.md'), 'utf8')

function codeBlockAfter (heading: string): string {
  const section = readme.slice(readme.indexOf(heading))
  const block = /```\w*\n([\s\S]*?)```/.exec(section)
  assert.ok(block != null, `a code block after ${heading}`)
  return block[1]
}

test('the Quick start keeps its two commands; the first answer is one command naming a catalog model the SDK example uses', () => {
  const quickStart = codeBlockAfter('## Quick start').trim().split('\n').map((line) => line.replace(/\s+#.*$/, ''))
  assert.deepEqual(quickStart, ['npm install && npm start', 'npm install && npm test'])

  const first = codeBlockAfter('### Your first answer').trim().split('\n')
  assert.equal(first.length, 1)
  const run = /^npx meshnode run (\S+) "Hello"$/.exec(first[0])
  assert.ok(run != null, first[0])
  assert.ok(findCatalogEntry(run[1]) != null, `${run[1]} is in the catalog`)
  assert.ok(buildProgram().commands.some((command) => command.name() === 'run'))

  const sdk = codeBlockAfter('### From your own code')
  assert.match(sdk, /baseURL: 'http:\/\/127\.0\.0\.1:11435\/v1'/)
  assert.ok(sdk.includes(`model: '${run[1]}'`), 'the SDK example asks the model the first answer loaded')
})
