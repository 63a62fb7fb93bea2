// docs/ARCHITECTURE.md is how a newcomer finds their way: every file it names exists, every class and
// method it names by a code span is in the code (a method in the class named), and each of the two traced paths stays within five files.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { existsSync, readFileSync, readdirSync } from 'node:fs'
import { join } from 'node:path'

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

test('a chat placed on a peer and a credit transfer are each traced through at most five files', () => {
  for (const start of ['A chat placed on a peer, in five files', '1. `POST /v1/app/wallet/send`']) {
    const text = start.startsWith('1.') ? doc.slice(doc.indexOf(start), doc.indexOf('## Storage')) : paragraph(start)
    const files = new Set([...text.matchAll(/`(src\/[^`\s]+\.ts)`/g)].map((match) => match[1]))
    assert.ok(files.size >= 3 && files.size <= 5, `${start}: ${[...files].join(', ')}`)
  }
})
