// docs/ARCHITECTURE.md is how a newcomer finds their way: every file it names exists, every class and method it names by
// a code span is in the code (a method in the class named), and the paths it traces are short and follow the code's
// imports: a local chat in at most eight files and none of the network's, a chat on a peer and a credit transfer in five.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { existsSync, readFileSync, readdirSync } from 'node:fs'
import { dirname, join } from 'node:path'

const root = join(import.meta.dirname, '..')
const doc = readFileSync(join(root, 'docs', 'ARCHITECTURE.md'), 'utf8')

function sourceFiles (dir: string): string[] {
  return readdirSync(join(root, dir), { withFileTypes: true, recursive: true })
    .filter((entry) => entry.isFile() && entry.name.endsWith('.ts'))
    .map((entry) => join(entry.parentPath, entry.name))
}

const src = sourceFiles('src')

/** The section of the doc that starts with `start` and ends at the next paragraph break or heading. */
function paragraph (start: string): string {
  const from = doc.indexOf(start)
  assert.ok(from >= 0, `the doc has "${start}"`)
  const rest = doc.slice(from)
  const end = rest.search(/\n\n/)
  return end < 0 ? rest : rest.slice(0, end)
}

test('every file ARCHITECTURE.md names exists', () => {
  const paths = [...doc.matchAll(/`((?:src|test|bench|docs|dashboard)\/[^`\s]*)`/g)].map((match) => match[1])
  const names = [...doc.matchAll(/`([a-z][a-z0-9-]*\.ts)`/g)].map((match) => match[1])
  assert.ok(paths.length > 10 && names.length > 3, 'the doc names files')
  for (const path of paths) assert.ok(existsSync(join(root, path)), `${path} exists`)
  for (const name of names) assert.ok(src.some((file) => file.endsWith(`/${name}`)), `${name} is a file in src/`)
})

test('the classes, functions and methods ARCHITECTURE.md names are in src/', () => {
  const code = src.map((file) => readFileSync(file, 'utf8')).join('\n')
  const named = new Set([...doc.matchAll(/`([A-Za-z][A-Za-z0-9]*)(?:\.([a-z][A-Za-z0-9]*))?`/g)]
    .filter((match) => !/^(?:ts|db|md|json)$/.test(match[2] ?? '') && (/[a-z][A-Z]|^[A-Z][a-z]+[A-Z]/.test(match[1]) || match[2] != null))
    .map((match) => match[0].slice(1, -1)))
  assert.ok(named.size > 10, `the doc names code: ${[...named].join(', ')}`)
  for (const name of named) {
    const [owner, member] = name.split('.')
    if (member == null || /^[a-z]/.test(owner)) {
      assert.ok(new RegExp(`\\b${member ?? owner}\\b`).test(code), `${name} is in src/`)
    } else {
      const file = src.find((path) => new RegExp(`class ${owner}\\b`).test(readFileSync(path, 'utf8')))
      assert.ok(file != null, `class ${owner} is declared`)
      assert.ok(new RegExp(`\\n\\s+(?:async\\s+)?${member}\\s*(?:<[^>]*>)?\\s*\\(`).test(readFileSync(file, 'utf8')), `${name} is a method of ${owner}`)
    }
  }
})

/** The files a traced path names, in order. */
function traced (text: string): string[] {
  return [...new Set([...text.matchAll(/`(src\/[^`\s]+\.ts)`/g)].map((match) => match[1]))]
}

/** The names `file` imports from each file it imports (an index.ts as itself: its re-exports are resolved below). */
function namedImports (file: string): Array<{ target: string, names: string[] }> {
  const text = readFileSync(file, 'utf8')
  const found: Array<{ target: string, names: string[] }> = []
  for (const match of text.matchAll(/import\s+(?:type\s+)?(?:\w+\s*,\s*)?\{([^}]*)\}\s+from\s+'(\.[^']+)'/g)) {
    const names = match[1].split(',').map((name) => name.replace(/\btype\b/, '').split(/\sas\s/)[0].trim()).filter((name) => name !== '')
    found.push({ target: join(dirname(file), match[2]), names })
  }
  return found
}

function exportsName (file: string, name: string): boolean {
  return new RegExp(`export (?:async )?(?:function|class|interface|type|const) ${name}\\b`).test(readFileSync(file, 'utf8'))
}

/**
 * Each file of a path after the first is reached from a file before it: imported by it, directly or by a name its
 * domain's index.ts re-exports from it, or a class implementing an interface that file imports (a part the
 * composition root hands in).
 */
function assertConnected (what: string, files: string[]): void {
  for (let i = 1; i < files.length; i++) {
    const file = join(root, files[i])
    const implemented = [...readFileSync(file, 'utf8').matchAll(/\bimplements\s+(\w+)/g)].map((match) => match[1])
    const reached = files.slice(0, i).some((earlier) => namedImports(join(root, earlier)).some(({ target, names }) =>
      target === file ||
      (target.endsWith('index.ts') && names.some((name) => exportsName(file, name))) ||
      names.some((name) => implemented.includes(name))))
    assert.ok(reached, `${what}: ${files[i]} is neither imported by ${files.slice(0, i).join(', ')} nor implements what they import`)
  }
}

test('a local chat is traced through at most eight files, none in src/network/, each reached from the ones before by the code\'s imports', () => {
  const files = traced(paragraph('A local chat, in eight files'))
  assert.ok(files.length >= 5 && files.length <= 8, files.join(', '))
  assert.deepEqual(files.filter((file) => file.startsWith('src/network/')), [])
  assertConnected('a local chat', files)
})

test('a chat placed on a peer and a credit transfer are each traced through at most five files, each reached by the code\'s imports', () => {
  const peer = traced(paragraph('A chat placed on a peer, in five files'))
  const transfer = traced(doc.slice(doc.indexOf('1. `POST /v1/app/wallet/send`'), doc.indexOf('## Storage')))
  for (const [what, files] of [['a chat on a peer', peer], ['a credit transfer', transfer]] as const) {
    assert.ok(files.length >= 3 && files.length <= 5, `${what}: ${files.join(', ')}`)
  }
  assertConnected('a credit transfer', transfer)
})
