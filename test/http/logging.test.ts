import { test } from 'node:test'
import assert from 'node:assert/strict'
import { Writable } from 'node:stream'
import { startNode } from '../../src/node.ts'
import { defaultConfig } from '../../src/config.ts'
import { Api, tempDir } from '../support/node.ts'

test('logs are structured, carry request ids, and never contain a key, the admin token or a passcode', async (t) => {
  const lines: string[] = []
  const sink = new Writable({ write (chunk, _encoding, done) { lines.push(...String(chunk).split('\n').filter((l) => l !== '')); done() } })
  const node = await startNode(defaultConfig({ port: 0, dataDir: await tempDir(t), logLevel: 'debug' }), { logDestination: sink })
  t.after(() => node.close())
  const api = new Api(node.url)
  const { body: key } = await api.post('/v1/app/apikeys', { name: 'secret-holder' })
  await api.patch('/v1/app/settings', { cluster_passcode: 'hunter2-passcode', allow_network_access: true }, { authorization: `Bearer ${key.key}` })
  const authed = api.withHeaders({ authorization: `Bearer ${key.key}` })
  await authed.get('/v1/app')
  await api.get('/v1/app', { authorization: `Bearer ${key.key}-wrong` })
  await api.get('/v1/app', { authorization: `Bearer ${node.adminToken}` })
  await node.close()

  const records = lines.map((line) => JSON.parse(line) as { reqId?: string, msg: string, status?: number })
  const requests = records.filter((r) => r.msg === 'request')
  assert.ok(requests.length >= 5)
  assert.ok(requests.every((r) => typeof r.reqId === 'string' && r.reqId.length === 36), 'every request line has its id')
  assert.ok(requests.some((r) => r.status === 401))
  const all = lines.join('\n')
  for (const secret of [key.key, key.key.slice(3, 30), node.adminToken, 'hunter2-passcode']) {
    assert.ok(!all.includes(secret), 'a secret reached the log')
  }
})
