// The test tiers (test/tiers.json, run by scripts/test-tier.ts) hold: every test file is in exactly one tier, a unit
// file starts nothing (no node, no listener, no child process) and a node file starts no process. What a file starts
// is read from its imports: the node modules and packages it takes values from, and the test helpers it uses, each
// helper judged by the code it runs (a helper that calls one that starts something starts it too); and from the
// calls in its own code that start something (startNode, createPeerHost, .listen, spawn...).
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { readFileSync, readdirSync } from 'node:fs'
import { dirname, join, relative, resolve } from 'node:path'
import { TIERS, manifestProblems, testFiles, tierFiles } from '../scripts/test-tier.ts'

const root = join(import.meta.dirname, '..')
const SUPPORT = join(root, 'test', 'support')

/** `process`: a child process, a signal to one or a browser. `listener`: a node, a server, a libp2p host. */
type Effect = 'process' | 'listener'

/** Modules whose values start something, however they are used. A type import starts nothing. */
const MODULE_EFFECTS: Record<string, Effect> = {
  child_process: 'process',
  cluster: 'process',
  'playwright-core': 'process',
  net: 'listener',
  http: 'listener',
  https: 'listener',
  http2: 'listener',
  dgram: 'listener',
  fastify: 'listener'
}

/** Calls that start something, wherever the function comes from. */
const CALL_EFFECTS: Array<[RegExp, Effect]> = [
  [/\b(?:spawn|spawnSync|execFile|execFileSync|execSync|fork)\s*\(/, 'process'],
  [/\.kill\s*\(/, 'process'],
  [/\bchromium\.launch\b/, 'process'],
  [/\b(?:startNode|createPeerHost|startRelay|createLibp2p|createServer)\s*\(/, 'listener'],
  [/\.listen\s*\(/, 'listener'],
  [/\bnew\s+PeerNetwork\b/, 'listener']
]

interface Binding { imported: string, local: string }
interface Import { specifier: string, bindings: Binding[] }

/** The code without comments (a `//` after a colon is a URL, kept). */
function code (file: string): string {
  return readFileSync(file, 'utf8').replace(/\/\*[\s\S]*?\*\//g, '').replace(/(^|[^:])\/\/.*$/gm, '$1')
}

/** Whether `text` names `name` (as a whole word). */
function mentions (text: string, name: string): boolean {
  return name !== '' && new RegExp(`(?<![\\w$])${name.replace(/\$/g, '\\$')}(?![\\w$])`).test(text)
}

/** The value imports of `text`: what each takes (`*` for a namespace or a dynamic import) and under which name. */
function valueImports (text: string): Import[] {
  const found: Import[] = []
  for (const match of text.matchAll(/^\s*import\s+(type\s+)?([^'";]*?)\s+from\s+['"]([^'"]+)['"]/gm)) {
    if (match[1] != null) continue
    const clause = match[2]
    const bindings: Binding[] = []
    for (const part of /\{([^}]*)\}/.exec(clause)?.[1].split(',') ?? []) {
      const [imported, local] = part.trim().split(/\s+as\s+/)
      if (imported !== '' && !imported.startsWith('type ')) bindings.push({ imported, local: local ?? imported })
    }
    const rest = clause.replace(/\{[^}]*\}/, '').replace(/,/g, ' ').trim()
    const namespace = /^\*\s+as\s+([\w$]+)$/.exec(rest)
    if (namespace != null) bindings.push({ imported: '*', local: namespace[1] })
    else if (rest !== '') bindings.push({ imported: 'default', local: rest })
    if (bindings.length > 0) found.push({ specifier: match[3], bindings })
  }
  for (const match of text.matchAll(/\bimport\(\s*['"]([^'"]+)['"]\s*\)/g)) found.push({ specifier: match[1], bindings: [{ imported: '*', local: '' }] })
  return found
}

function callEffects (text: string): Set<Effect> {
  return new Set(CALL_EFFECTS.filter(([pattern]) => pattern.test(text)).map(([, effect]) => effect))
}

/** The test helper module an import names, as a path relative to the repo; null for anything else. */
function supportModule (from: string, specifier: string): string | null {
  if (!specifier.startsWith('.')) return null
  const target = resolve(dirname(from), specifier)
  return relative(SUPPORT, target).startsWith('..') ? null : relative(root, target)
}

function moduleEffect (specifier: string): Effect | undefined {
  return MODULE_EFFECTS[specifier.replace(/^node:/, '')]
}

const DECLARATION = /^(?:export\s+)?(?:default\s+)?(?:async\s+)?(function\*?|class|const|let|var|interface|type)\s+([A-Za-z_$][\w$]*)/

/**
 * What each top-level name of each test helper module starts: by its own calls and the modules' values it uses, then
 * by the names of its module and the helpers it uses, until nothing changes. Types start nothing.
 */
function helperEffects (): Map<string, Map<string, Set<Effect>>> {
  const modules = readdirSync(SUPPORT).filter((name) => name.endsWith('.ts') && !name.endsWith('.test.ts')).map((name) => join(SUPPORT, name))
  const parsed = modules.map((file) => {
    const text = code(file)
    const declarations: Array<{ name: string, body: string }> = []
    let current: { name: string, body: string } | null = null
    for (const line of text.split('\n')) {
      const declared = DECLARATION.exec(line)
      if (declared != null) {
        current = { name: declared[2], body: /^(?:interface|type)$/.test(declared[1]) ? '' : line }
        declarations.push(current)
        if (current.body === '') current = null
      } else if (current != null) {
        current.body += `\n${line}`
      }
    }
    const imports = valueImports(text)
    const helpers = imports.flatMap(({ specifier, bindings }) => {
      const module = supportModule(file, specifier)
      return module == null ? [] : bindings.map((binding) => ({ module, ...binding }))
    })
    const effects = new Map(declarations.map(({ name, body }) => {
      const own = callEffects(body)
      for (const { specifier, bindings } of imports) {
        const effect = moduleEffect(specifier)
        if (effect != null && bindings.some(({ local }) => mentions(body, local))) own.add(effect)
      }
      return [name, own]
    }))
    return { module: relative(root, file), declarations, helpers, effects }
  })
  const byModule = new Map(parsed.map(({ module, effects }) => [module, effects]))
  let changed = true
  while (changed) {
    changed = false
    for (const { declarations, helpers, effects } of parsed) {
      for (const { name, body } of declarations) {
        const found = effects.get(name) as Set<Effect>
        const uses = [
          ...declarations.filter((other) => other.name !== name && mentions(body, other.name)).map((other) => effects.get(other.name)),
          ...helpers.filter(({ local }) => mentions(body, local)).flatMap(({ module, imported }) => {
            const theirs = byModule.get(module)
            return imported === '*' ? [...theirs?.values() ?? []] : [theirs?.get(imported)]
          })
        ]
        for (const effect of uses.flatMap((set) => [...set ?? []])) {
          if (!found.has(effect)) { found.add(effect); changed = true }
        }
      }
    }
  }
  return byModule
}

const HELPERS = helperEffects()

/** What `file` starts, each with where it comes from. */
function startsOf (file: string): Array<{ effect: Effect, why: string }> {
  const path = join(root, file)
  const text = code(path)
  const found: Array<{ effect: Effect, why: string }> = []
  for (const { specifier, bindings } of valueImports(text)) {
    const effect = moduleEffect(specifier)
    if (effect != null) found.push({ effect, why: `imports ${bindings.map(({ imported }) => imported).join(', ')} from ${specifier}` })
    const module = supportModule(path, specifier)
    const helpers = module == null ? undefined : HELPERS.get(module)
    if (module == null || helpers == null) continue
    for (const { imported } of bindings) {
      for (const name of imported === '*' ? [...helpers.keys()] : [imported]) {
        for (const helperEffect of helpers.get(name) ?? []) found.push({ effect: helperEffect, why: `uses ${name} from ${module}` })
      }
    }
  }
  for (const [pattern, effect] of CALL_EFFECTS) {
    if (pattern.test(text)) found.push({ effect, why: `calls ${pattern.source}` })
  }
  return found
}

test('every test file is in exactly one tier, and the tiers are the whole suite', () => {
  assert.deepEqual(manifestProblems(root), [])
  const all = testFiles(root)
  const tiered = TIERS.flatMap((tier) => tierFiles(root, tier))
  assert.deepEqual([...tiered].sort(), all, 'each test file once')
  assert.ok(all.includes('test/tiers.test.ts') && tierFiles(root, 'unit').includes('test/tiers.test.ts'))
})

test('the helpers that start something are recognised as such', () => {
  const helper = (module: string, name: string): Effect[] => [...HELPERS.get(module)?.get(name) ?? []].sort()
  assert.deepEqual(helper('test/support/node.ts', 'startTestNode'), ['listener'])
  assert.deepEqual(helper('test/support/node.ts', 'spawnNodeProcess'), ['process'])
  assert.deepEqual(helper('test/support/node.ts', 'tempDir'), [])
  assert.deepEqual(helper('test/support/node.ts', 'waitFor'), [])
  assert.deepEqual(helper('test/support/chat-node.ts', 'startChatNode'), ['listener'])
  assert.deepEqual(helper('test/support/fake-hub.ts', 'startFakeHub'), ['listener'])
  assert.deepEqual(helper('test/support/cli.ts', 'runCli'), ['process'])
  assert.deepEqual(helper('test/support/light-cluster.ts', 'LightCluster'), ['process'])
  assert.deepEqual(helper('test/support/tiny-gguf.ts', 'writeTinyGguf'), [])
})

test('a unit-tier file starts nothing: no node, no listener, no child process', () => {
  const starting = tierFiles(root, 'unit').flatMap((file) => startsOf(file).map(({ why }) => `${file} ${why}`))
  assert.deepEqual(starting, [], 'move these files to the node or system tier in test/tiers.json')
})

test('a node-tier file starts no process: the CLI, a node as a process, signals and browsers are the system tier', () => {
  const starting = tierFiles(root, 'node').flatMap((file) => startsOf(file).filter(({ effect }) => effect === 'process').map(({ why }) => `${file} ${why}`))
  assert.deepEqual(starting, [], 'list these files under "system" in test/tiers.json')
})
