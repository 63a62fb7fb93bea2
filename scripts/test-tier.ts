// Runs one tier of the test suite: `node scripts/test-tier.ts <unit|node|system> [node --test options]`, what
// `npm run test:unit`, `test:node` and `test:system` do. test/tiers.json lists the unit and the system files; every
// other test file is node. The three tiers together are `npm test`, with the same flags, so a tier passes or fails a
// file as the whole suite does. A manifest naming a file that is not there, or one in both lists, stops the run: a
// tier would quietly leave a file out.
import { spawn } from 'node:child_process'
import { globSync, readFileSync } from 'node:fs'
import { join, resolve, sep } from 'node:path'

export const TIERS = ['unit', 'node', 'system'] as const
export type Tier = typeof TIERS[number]

/** What `npm test` gives node: the compile cache in every test process, two files at once, five minutes a test. */
export const NODE_TEST_FLAGS = ['--import', './test/support/compile-cache.ts', '--test', '--test-concurrency=2', '--test-timeout=300000']

/** Every test file of the suite (each `*.test.ts` under test/, as `npm test` runs them), relative to `root`, sorted. */
export function testFiles (root: string): string[] {
  return globSync('test/**/*.test.ts', { cwd: root }).map((file) => file.split(sep).join('/')).sort()
}

interface Manifest { unit: string[], system: string[] }

export function readManifest (root: string): Manifest {
  const manifest = JSON.parse(readFileSync(join(root, 'test', 'tiers.json'), 'utf8')) as Partial<Manifest>
  return { unit: manifest.unit ?? [], system: manifest.system ?? [] }
}

/** What is wrong with the manifest: a listed file that is not a test file, or one listed twice. */
export function manifestProblems (root: string): string[] {
  const { unit, system } = readManifest(root)
  const files = new Set(testFiles(root))
  const problems: string[] = []
  const seen = new Set<string>()
  for (const [tier, listed] of [['unit', unit], ['system', system]] as const) {
    for (const file of listed) {
      if (!files.has(file)) problems.push(`test/tiers.json lists ${file} (${tier}), which is not a test file`)
      if (seen.has(file)) problems.push(`test/tiers.json lists ${file} more than once`)
      seen.add(file)
    }
  }
  return problems
}

/** The test files of `tier`: its list in test/tiers.json, or for `node` every test file in neither list. */
export function tierFiles (root: string, tier: Tier): string[] {
  const { unit, system } = readManifest(root)
  if (tier === 'unit') return [...unit].sort()
  if (tier === 'system') return [...system].sort()
  const listed = new Set([...unit, ...system])
  return testFiles(root).filter((file) => !listed.has(file))
}

if (import.meta.main) {
  const root = resolve(import.meta.dirname, '..')
  const [tier, ...options] = process.argv.slice(2)
  if (!(TIERS as readonly string[]).includes(tier)) {
    process.stderr.write(`usage: node scripts/test-tier.ts <${TIERS.join('|')}> [node --test options]\n`)
    process.exit(2)
  }
  const problems = manifestProblems(root)
  if (problems.length > 0) {
    for (const problem of problems) process.stderr.write(`${problem}\n`)
    process.exit(2)
  }
  const child = spawn(process.execPath, [...NODE_TEST_FLAGS, ...options, ...tierFiles(root, tier as Tier)], { cwd: root, stdio: 'inherit' })
  child.on('exit', (code) => { process.exitCode = code ?? 1 })   // killed by a signal: failed
}
