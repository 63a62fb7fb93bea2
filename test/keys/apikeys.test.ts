import { test } from 'node:test'
import assert from 'node:assert/strict'
import { readFile } from 'node:fs/promises'
import { join } from 'node:path'
import { DatabaseSync } from 'node:sqlite'
import { createHash } from 'node:crypto'
import { startTestNode } from '../support/node.ts'

test('generate shows the key once; the list shows only the masked prefix', async (t) => {
  const { api } = await startTestNode(t)
  const created = await api.post('/v1/app/apikeys', { name: 'laptop' })
  assert.equal(created.status, 200)
  assert.deepEqual(Object.keys(created.body).sort(), ['created', 'id', 'key', 'name', 'scope'])
  assert.match(created.body.id, /^[0-9a-f-]{36}$/)
  assert.equal(created.body.name, 'laptop')
  assert.ok(Buffer.from(created.body.key.replace(/^mn_/, ''), 'base64url').length === 32, '256 random bits')
  assert.ok(!Number.isNaN(Date.parse(created.body.created)))

  const list = await api.get('/v1/app/apikeys')
  assert.equal(list.status, 200)
  assert.equal(list.body.keys.length, 1)
  const row = list.body.keys[0]
  assert.deepEqual(row, {
    id: created.body.id,
    name: 'laptop',
    prefix: `${created.body.key.slice(0, 12)}...${created.body.key.slice(-4)}`,
    created: created.body.created,
    lastUsed: null,
    status: 'active',
    scope: 'admin'
  })
  assert.ok(!JSON.stringify(list.body).includes(created.body.key), 'the listing never holds the key')
})

test('keys are stored only as SHA-256', async (t) => {
  const { api, dataDir, node } = await startTestNode(t)
  const { body } = await api.post('/v1/app/apikeys', { name: 'ci' })
  const db = new DatabaseSync(join(dataDir, 'meshnode.db'), { readOnly: true })
  t.after(() => { db.close() })
  const row = db.prepare('SELECT hash FROM api_keys WHERE id = ?').get(body.id) as { hash: string }
  assert.equal(row.hash, createHash('sha256').update(body.key).digest('hex'))
  await node.close()
  for (const file of ['meshnode.db', 'meshnode.db-wal']) {
    const bytes = await readFile(join(dataDir, file)).catch(() => Buffer.alloc(0))
    assert.ok(!bytes.includes(Buffer.from(body.key)), `${file} does not hold the key`)
  }
})

test('revoke: 200 with status revoked, twice is still 200, unknown id 404, bad bodies 400', async (t) => {
  const { api } = await startTestNode(t)
  const { body: key } = await api.post('/v1/app/apikeys', { name: 'temp' })
  const first = await api.post('/v1/app/apikeys/revoke', { id: key.id })
  assert.equal(first.status, 200)
  assert.deepEqual(first.body, { status: 'revoked', id: key.id })
  const again = await api.post('/v1/app/apikeys/revoke', { id: key.id })
  assert.equal(again.status, 200)
  const unknown = await api.post('/v1/app/apikeys/revoke', { id: '00000000-0000-4000-8000-000000000000' })
  assert.equal(unknown.status, 404)
  assert.equal(unknown.body.error.type, 'not_found')
  assert.match(unknown.body.error.message, /00000000-0000-4000-8000-000000000000/)
  for (const body of [{}, { id: 5 }, { id: '' }]) {
    const res = await api.post('/v1/app/apikeys/revoke', body)
    assert.equal(res.status, 400, JSON.stringify(body))
    assert.equal(res.body.error.param, 'id')
  }
  const list = await api.get('/v1/app/apikeys')
  assert.deepEqual(list.body.keys.map((k: { status: string }) => k.status), ['revoked'])
})

test('generate refuses a missing, empty, wrong-typed or overlong name and creates nothing', async (t) => {
  const { api } = await startTestNode(t)
  for (const body of [{}, { name: '' }, { name: '   ' }, { name: 7 }, { name: 'x'.repeat(129) }, { name: null }]) {
    const res = await api.post('/v1/app/apikeys', body)
    assert.equal(res.status, 400, JSON.stringify(body))
    assert.equal(res.body.error.type, 'invalid_request_error')
    assert.equal(res.body.error.param, 'name')
  }
  const malformed = await api.send('POST', '/v1/app/apikeys', '{"name":', { 'content-type': 'application/json' })
  assert.equal(malformed.status, 400)
  assert.deepEqual((await api.get('/v1/app/apikeys')).body.keys, [])
})

test('concurrent generates each get a distinct key, all listed', async (t) => {
  const { api } = await startTestNode(t)
  const results = await Promise.all(Array.from({ length: 25 }, (_, i) => api.post('/v1/app/apikeys', { name: `k${i}` })))
  assert.ok(results.every((r) => r.status === 200))
  assert.equal(new Set(results.map((r) => r.body.key)).size, 25)
  assert.equal((await api.get('/v1/app/apikeys')).body.keys.length, 25)
})
