import { test } from 'node:test'
import assert from 'node:assert/strict'
import { Writable } from 'node:stream'
import { startNode } from '../../src/node.ts'
import { defaultConfig } from '../../src/config.ts'
import { join } from 'node:path'
import { Api, tempDir, waitFor } from '../support/node.ts'
import { writeTinyGguf } from '../support/tiny-gguf.ts'

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

test('a client that leaves mid-request leaves one info line, no error and no stack, and counts in /metrics', async (t) => {
  const lines: string[] = []
  const sink = new Writable({ write (chunk, _encoding, done) { lines.push(...String(chunk).split('\n').filter((l) => l !== '')); done() } })
  const dir = await tempDir(t)
  const node = await startNode(defaultConfig({ port: 0, dataDir: dir, logLevel: 'info', threads: 1, contextSize: 32_768 }), { logDestination: sink })
  t.after(() => node.close())
  const { path } = await writeTinyGguf(join(dir, 'tiny.gguf'), { contextLength: 32_768 })
  await node.engine.load('tiny', path)

  for (const stream of [true, false]) {
    const leaving = new AbortController()
    // Greedy on a long context: the answer would take minutes, so the client surely leaves in the middle of it
    const request = fetch(`${node.url}/v1/chat/completions`, {
      method: 'POST', signal: leaving.signal, headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'tiny', messages: [{ role: 'user', content: 'go' }], max_tokens: 100_000, temperature: 0, stream })
    })
    await waitFor(() => node.engine.stats().busySlots === 1, { what: 'generation to start' })
    leaving.abort()
    await request.catch(() => undefined)
    await waitFor(() => node.engine.stats().busySlots === 0, { what: 'the generation to stop' })
  }
  const metrics = await (await fetch(`${node.url}/metrics`)).text()
  assert.match(metrics, /^meshnode_http_client_disconnects_total\{route="\/v1\/chat\/completions"\} 2$/m)

  const records = lines.map((line) => JSON.parse(line) as { level: number, msg: string, err?: unknown, path?: string })
  const left = records.filter((r) => r.msg === 'client disconnected before the response was complete')
  assert.equal(left.length, 2, 'one line per request')
  assert.ok(left.every((r) => r.level === 30 && r.err === undefined && r.path === '/v1/chat/completions'))
  assert.deepEqual(records.filter((r) => r.level >= 50), [], 'nothing logged as an error: ' + lines.filter((l) => l.includes('"level":50')).join('\n'))
})
