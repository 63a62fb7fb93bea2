// The CLI's shape, checked on the program itself: every command that talks to a node takes the same options, so
// `--data-dir` (where the admin-token is) and `--url` work everywhere (CLI consistency).
import { test } from 'node:test'
import assert from 'node:assert/strict'
import type { Command } from 'commander'
import { buildProgram } from '../../src/cli/program.ts'

/** Commands that start something themselves rather than talk to a node over HTTP. */
const NOT_CLIENTS = new Set(['serve', 'relay', 'gpu install', 'gpu uninstall'])

function leaves (command: Command, prefix = ''): Array<{ name: string, command: Command }> {
  const name = `${prefix}${prefix === '' ? '' : ' '}${command.name()}`.trim()
  if (command.commands.length === 0) return [{ name, command }]
  return command.commands.flatMap((child) => leaves(child, command.parent == null ? '' : name))
}

test('every client command takes --port, --url, --api-key, --data-dir and --json', () => {
  const clients = leaves(buildProgram()).filter(({ name }) => !NOT_CLIENTS.has(name))
  assert.ok(clients.length >= 30, `${clients.length} client commands`)
  for (const { name, command } of clients) {
    const options = command.options.map((option) => option.long)
    for (const wanted of ['--port', '--url', '--api-key', '--data-dir', '--json']) {
      assert.ok(options.includes(wanted), `meshnode ${name} lacks ${wanted}`)
    }
  }
  for (const name of ['serve', 'relay', 'gpu install', 'gpu uninstall']) {
    const found = leaves(buildProgram()).find((leaf) => leaf.name === name)
    assert.ok(found?.command.options.some((option) => option.long === '--data-dir'), `meshnode ${name} takes --data-dir too`)
  }
})
