import { test } from 'node:test'
import assert from 'node:assert/strict'
import { createHash } from 'node:crypto'
import { join } from 'node:path'
import OpenAI from 'openai'
import { runCli } from '../support/cli.ts'
import { startChatNode, TINY_MODEL_ID } from '../support/chat-node.ts'
import { olderDatabase, versionBefore } from '../support/database.ts'
import { startTestNode } from '../support/node.ts'

/** Admin routes an inference key must not reach, one or more per resource. */
const ADMIN_ROUTES: Array<[method: string, path: string, body?: unknown]> = [
  ['GET', '/v1/app'],
  ['GET', '/v1/app/apikeys'],
  ['POST', '/v1/app/apikeys', { name: 'escalate' }],
  ['POST', '/v1/app/apikeys/revoke', { id: '00000000-0000-4000-8000-000000000000' }],
  ['PATCH', '/v1/app/settings', { allow_network_access: false }],
  ['GET', '/v1/app/wallet'],
  ['GET', '/v1/app/wallet/transactions'],
  ['POST', '/v1/app/wallet/send', { peerID: 'ab'.repeat(32), amount: 1 }],
  ['GET', '/v1/app/ptn'],
  ['POST', '/v1/app/ptn/create', { name: 'mine now' }],
  ['POST', '/v1/app/ptn/import-ca-key', { ptnID: 'ab'.repeat(32), caKeyHex: 'cd'.repeat(32) }],
  ['GET', '/v1/app/models'],
  ['POST', '/v1/app/models/load', { modelID: TINY_MODEL_ID }],
  ['GET', '/v1/app/peers'],
  ['GET', '/v1/app/events'],
  ['GET', '/v1/app/agent/profile'],
  ['GET', '/metrics'],
  ['GET', '/openapi.json']
]

test('an inference key can chat and list models, and gets 403 permission_error on keys, settings, wallet, PTN and every other admin route', async (t) => {
  const { api, node } = await startChatNode(t)
  const created = await api.post('/v1/app/apikeys', { name: 'chat client', scope: 'inference' })
  assert.equal(created.status, 200)
  assert.equal(created.body.scope, 'inference')
  const admin = (await api.post('/v1/app/apikeys', { name: 'owner' })).body
  assert.equal(admin.scope, 'admin', 'admin is the default')
  assert.equal((await api.patch('/v1/app/settings', { allow_network_access: true })).status, 200)

  const openai = new OpenAI({ baseURL: `${node.url}/v1`, apiKey: created.body.key, maxRetries: 0, timeout: 60_000 })
  const models = await openai.models.list()
  assert.ok(models.data.some((m) => m.id === TINY_MODEL_ID))
  const answer = await openai.chat.completions.create({ model: TINY_MODEL_ID, messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 })
  assert.equal(answer.object, 'chat.completion')
  const stream = await openai.chat.completions.create({ model: TINY_MODEL_ID, messages: [{ role: 'user', content: 'hi' }], max_tokens: 4, stream: true })
  let chunks = 0
  for await (const chunk of stream) chunks += chunk.choices.length
  assert.ok(chunks > 0)

  const inference = api.withHeaders({ authorization: `Bearer ${created.body.key}` })
  const owner = api.withHeaders({ authorization: `Bearer ${admin.key}` })
  const before = await owner.get('/v1/app')
  for (const [method, path, body] of ADMIN_ROUTES) {
    const res = await inference.send(method, path, body === undefined ? undefined : JSON.stringify(body), body === undefined ? {} : { 'content-type': 'application/json' })
    assert.equal(res.status, 403, `${method} ${path}`)
    assert.equal(res.body.error.type, 'permission_error', `${method} ${path}`)
    assert.match(res.body.error.message, /inference scope/)
  }
  assert.equal((await inference.get('/health')).status, 200)
  // The other OpenAI-compatible endpoints are in the scope too: whatever they answer, it is not a 403.
  for (const [method, path, body] of [['POST', '/v1/completions', { model: TINY_MODEL_ID, prompt: 'hi', max_tokens: 2 }],
    ['POST', '/v1/embeddings', { model: TINY_MODEL_ID, input: 'hi' }], ['POST', '/v1/tokenize', { model: TINY_MODEL_ID, content: 'hi' }],
    ['POST', '/v1/detokenize', { model: TINY_MODEL_ID, tokens: [1] }], ['GET', `/v1/models/${TINY_MODEL_ID}`, undefined]] as const) {
    const res = await inference.send(method, path, body === undefined ? undefined : JSON.stringify(body), body === undefined ? {} : { 'content-type': 'application/json' })
    assert.notEqual(res.status, 403, `${method} ${path}: ${JSON.stringify(res.body)}`)
  }
  assert.equal((await inference.get('/v1/nothing-here')).status, 404, 'an unknown route is still a 404')

  // Nothing changed: no key made, settings and wallet as they were.
  const after = await owner.get('/v1/app')
  assert.deepEqual(after.body.settings, before.body.settings)
  assert.deepEqual(after.body.wallet, before.body.wallet)
  assert.equal(after.body.ptn.memberships, 0)
  const listed = await owner.get('/v1/app/apikeys')
  assert.deepEqual(listed.body.keys.map((k: { name: string, scope: string }) => [k.name, k.scope]), [['chat client', 'inference'], ['owner', 'admin']])
  // The admin token is admin.
  assert.equal((await api.get('/v1/app/apikeys', { authorization: `Bearer ${node.adminToken}` })).status, 200)
})

test('generate refuses an unknown or wrong-typed scope and creates nothing', async (t) => {
  const { api } = await startTestNode(t)
  for (const scope of ['root', '', 'ADMIN', 5, null]) {
    const res = await api.post('/v1/app/apikeys', { name: 'k', scope })
    assert.equal(res.status, 400, JSON.stringify(scope))
    assert.equal(res.body.error.param, 'scope')
  }
  assert.deepEqual((await api.get('/v1/app/apikeys')).body.keys, [])
})

test('keys made before scopes existed are admin keys after the migration', async (t) => {
  const first = await startTestNode(t)
  await first.node.close()
  const key = 'mn_' + 'k'.repeat(43)
  // The database as the version before scoped keys left it: no scope column, one key.
  const db = olderDatabase(join(first.dataDir, 'meshnode.db'), versionBefore('ADD COLUMN scope'))
  db.prepare('INSERT INTO api_keys (id, name, hash, prefix, created) VALUES (?, ?, ?, ?, ?)')
    .run('00000000-0000-4000-8000-000000000001', 'old', createHash('sha256').update(key).digest('hex'), 'mn_kkkkkkkkk...kkkk', new Date().toISOString())
  db.close()
  const second = await startTestNode(t, { dataDir: first.dataDir })
  assert.deepEqual((await second.api.get('/v1/app/apikeys')).body.keys.map((k: { scope: string }) => k.scope), ['admin'])
  await second.api.patch('/v1/app/settings', { allow_network_access: true })
  assert.equal((await second.api.get('/v1/app/apikeys', { authorization: `Bearer ${key}` })).status, 200)
})

test('meshnode apikeys generate --scope inference; the listing shows the scope; an unknown scope is a usage error', async (t) => {
  const { node, dataDir } = await startTestNode(t)
  const common = ['--url', node.url, '--data-dir', dataDir]
  const generated = await runCli(['apikeys', 'generate', 'bot', '--scope', 'inference', ...common, '--json'])
  assert.equal(generated.code, 0, generated.stderr)
  assert.equal(JSON.parse(generated.stdout).scope, 'inference')
  const list = await runCli(['apikeys', 'list', ...common])
  assert.match(list.stdout, /^ID\s+NAME\s+PREFIX\s+SCOPE/m)
  assert.match(list.stdout, /bot\s+\S+\s+inference/)
  const bad = await runCli(['apikeys', 'generate', 'x', '--scope', 'root', ...common])
  assert.notEqual(bad.code, 0)
  assert.match(bad.stderr, /root/)
})

test('a dashboard session made from an inference key has the inference scope; one from an admin key is admin', async (t) => {
  const { api } = await startTestNode(t)
  const inference = (await api.post('/v1/app/apikeys', { name: 'bot', scope: 'inference' })).body
  const admin = (await api.post('/v1/app/apikeys', { name: 'owner' })).body
  await api.patch('/v1/app/settings', { allow_network_access: true })
  const cookieFor = async (apiKey: string): Promise<string> => {
    const signIn = await api.post('/v1/app/session', { apiKey })
    assert.equal(signIn.status, 200)
    return (signIn.headers.get('set-cookie') ?? '').split(';')[0]
  }
  const inferenceCookie = await cookieFor(inference.key)
  assert.equal((await api.get('/v1/models', { cookie: inferenceCookie })).status, 200)
  const refused = await api.get('/v1/app', { cookie: inferenceCookie })
  assert.equal(refused.status, 403)
  assert.equal(refused.body.error.type, 'permission_error')
  assert.equal((await api.get('/v1/app/apikeys', { cookie: inferenceCookie })).status, 403)
  assert.equal((await api.get('/v1/app', { cookie: await cookieFor(admin.key) })).status, 200)
})
