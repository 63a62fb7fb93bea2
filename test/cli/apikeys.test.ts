// `meshnode apikeys`: the scope of each key shown and chosen. A terminal asks for the scope, offering inference
// first; without one and without --scope the key gets the API's default (admin) and the command says so.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { runCli as meshnode } from '../support/cli.ts'
import { startTestNode } from '../support/node.ts'
import { HAS_TERMINAL, runCliInTerminal } from '../support/terminal.ts'

test('apikeys generate --scope makes a key of that scope; list shows each key\'s scope; without a terminal or --scope the key is admin, and the command says so', async (t) => {
  const { node, dataDir, api } = await startTestNode(t)
  const common = ['--url', node.url, '--data-dir', dataDir]

  const app = await meshnode(['apikeys', 'generate', 'app', '--scope', 'inference', ...common, '--json'])
  assert.equal(app.code, 0, app.stderr)
  assert.equal(JSON.parse(app.stdout).scope, 'inference')
  const owner = await meshnode(['apikeys', 'generate', 'owner', '--scope', 'admin', ...common])
  assert.equal(owner.code, 0, owner.stderr)
  assert.match(owner.stdout, /Key "owner" \(\S+, scope admin\) created/)
  assert.equal(owner.stderr, '', 'a scope given is not remarked on')

  const unnamed = await meshnode(['apikeys', 'generate', 'script', ...common])
  assert.equal(unnamed.code, 0, unnamed.stderr)
  assert.match(unnamed.stderr, /^No --scope given: the key has the admin scope\. A key for an app should be --scope inference\.$/m)

  const list = await meshnode(['apikeys', 'list', ...common])
  assert.equal(list.code, 0, list.stderr)
  assert.match(list.stdout, /^ID\s+NAME\s+PREFIX\s+SCOPE\s+STATUS/m)
  const scopes = Object.fromEntries(list.stdout.trim().split('\n').slice(1).map((line) => { const [, name, , scope] = line.split(/\s+/); return [name, scope] }))
  assert.deepEqual(scopes, { app: 'inference', owner: 'admin', script: 'admin' })
  const listed = (await api.get('/v1/app/apikeys')).body.keys.map((k: { name: string, scope: string }) => [k.name, k.scope]).sort()
  assert.deepEqual(listed, [['app', 'inference'], ['owner', 'admin'], ['script', 'admin']])

  const bad = await meshnode(['apikeys', 'generate', 'x', '--scope', 'root', ...common])
  assert.equal(bad.code, 2)
  assert.match(bad.stderr, /argument 'root' is invalid\. Allowed choices are admin, inference/)
})

test('apikeys generate in a terminal without --scope asks, offering inference first: Enter takes it, 2 takes admin', { skip: HAS_TERMINAL ? false : 'no `script` to give the command a terminal' }, async (t) => {
  const { node, dataDir, api } = await startTestNode(t)
  const common = ['--url', node.url, '--data-dir', dataDir]

  const enter = await runCliInTerminal(['apikeys', 'generate', 'chat-app', ...common], { input: '\n' })
  assert.equal(enter.code, 0, enter.output)
  assert.match(enter.output, /1\) inference: [^\n]*\n\s*2\) admin: /)
  assert.match(enter.output, /scope inference\) created/)
  const second = await runCliInTerminal(['apikeys', 'generate', 'ops', ...common], { input: '2\n' })
  assert.equal(second.code, 0, second.output)
  assert.match(second.output, /scope admin\) created/)
  assert.doesNotMatch(second.output, /No --scope given/, 'the scope was chosen')
  const wrong = await runCliInTerminal(['apikeys', 'generate', 'nope', ...common], { input: 'root\n' })
  assert.equal(wrong.code, 2, wrong.output)
  assert.match(wrong.output, /meshnode: the scope must be 1 \(inference\) or 2 \(admin\), not root/)

  const listed = (await api.get('/v1/app/apikeys')).body.keys.map((k: { name: string, scope: string }) => [k.name, k.scope]).sort()
  assert.deepEqual(listed, [['chat-app', 'inference'], ['ops', 'admin']], 'the refused answer made no key')
})
