import { test } from 'node:test'
import assert from 'node:assert/strict'
import { createRequire } from 'node:module'
import { Writable } from 'node:stream'
import { join } from 'node:path'
import { startTestNode, tempDir, waitFor, type Api } from '../support/node.ts'
import { bareHttpApp } from '../support/bare-app.ts'
import { startChatNode, TINY_MODEL_ID } from '../support/chat-node.ts'
import { startFakeHub } from '../support/fake-hub.ts'
import { writeTinyGguf } from '../support/tiny-gguf.ts'
import { createLogger } from '../../src/log.ts'

test('GET /health answers the contract shape without a key', async (t) => {
  const { api, nodeID } = await startTestNode(t)
  const res = await api.get('/health')
  assert.equal(res.status, 200)
  assert.deepEqual(Object.keys(res.body).sort(), ['nodeID', 'status', 'uptimeSeconds', 'version'])
  assert.equal(res.body.status, 'ok')
  assert.equal(res.body.nodeID, nodeID)
  assert.match(res.body.nodeID, /^[0-9a-f]{64}$/)
  assert.ok(res.headers.get('x-request-id'))
})

test('GET /v1/app is the full snapshot', async (t) => {
  const { api, nodeID, node } = await startTestNode(t, { name: 'alice' })
  const res = await api.get('/v1/app')
  assert.equal(res.status, 200)
  const app = res.body
  for (const key of ['node', 'hardware', 'model', 'models', 'peers', 'wallet', 'ptn', 'settings']) assert.ok(key in app, `snapshot has ${key}`)
  assert.deepEqual({ nodeID: app.node.nodeID, name: app.node.name, port: app.node.port }, { nodeID, name: 'alice', port: node.port })
  assert.equal(typeof app.hardware.cpu, 'string')
  assert.ok(app.hardware.cores >= 1)
  assert.ok(app.hardware.memoryGB > 0)
  assert.ok('gpu' in app.hardware)
  assert.equal(app.model, null)
  assert.ok(Array.isArray(app.models))
  assert.deepEqual(Object.keys(app.peers).sort(), ['lan', 'wan'])
  assert.equal(typeof app.wallet.currentBalance, 'number')
  assert.equal(typeof app.ptn.memberships, 'number')
  assert.equal(Object.keys(app.settings).length, 15) // 14 settings plus solana_rpc_url (an addition)
})

test('unknown routes answer 404 in the envelope (a known path with another method is a 405: test/http/hygiene.test.ts)', async (t) => {
  const { api } = await startTestNode(t)
  for (const [method, path] of [['GET', '/v1/nope'], ['POST', '/v1/app/nothing'], ['DELETE', '/healthz']]) {
    const res = await api.send(method, path, undefined)
    assert.equal(res.status, 404, `${method} ${path}`)
    assert.equal(res.body.error.type, 'not_found')
    assert.match(res.body.error.message, /Route not found/)
    assert.equal(res.body.error.param, null)
    assert.equal(res.body.error.code, null)
  }
})

test('messages with quotes and control characters stay valid JSON', async (t) => {
  const { api } = await startTestNode(t)
  const id = 'a "quoted" \\ id\nwith </script> and \u0000'
  const res = await api.post('/v1/app/apikeys/revoke', { id })
  assert.equal(res.status, 404)
  assert.equal(res.body.error.message, `API key not found: ${id}`)
})

test('GET /openapi.json documents every route with its schemas', async (t) => {
  const { api } = await startTestNode(t)
  const res = await api.get('/openapi.json')
  assert.equal(res.status, 200)
  assert.match(res.body.openapi, /^3\./)
  for (const path of ['/health', '/v1/app', '/v1/app/settings', '/v1/app/apikeys', '/v1/app/apikeys/revoke']) {
    assert.ok(path in res.body.paths, `${path} documented`)
  }
  const patch = res.body.paths['/v1/app/settings'].patch
  assert.ok(patch.responses['200'], 'PATCH settings has a response schema')
  assert.ok(patch.responses['400'], 'and its error envelope')
})

test('zod alone validates and serializes: fastify\'s default compilers (ajv, fast-json-stringify) are never loaded', async (t) => {
  const { api } = await startTestNode(t)
  const bad = await api.patch('/v1/app/settings', { max_storage_gb: 'lots' })
  assert.equal(bad.status, 400, 'a body zod refuses')
  assert.equal(bad.body.error.type, 'invalid_request_error')
  const good = await api.get('/v1/app')
  assert.equal(good.status, 200, 'a response zod serializes')
  assert.equal((await api.get('/openapi.json')).status, 200)
  // fastify and both compilers are CommonJS: whatever was loaded, by any test of this file, is in require's cache
  const loaded = Object.keys(createRequire(import.meta.url).cache)
  assert.ok(loaded.some((file) => file.includes('/node_modules/fastify/')), 'the cache does list what fastify loads')
  assert.deepEqual(loaded.filter((file) => /\/node_modules\/(ajv|ajv-formats|@fastify\/ajv-compiler|@fastify\/fast-json-stringify-compiler)\//.test(file)), [])
})

test('GET /metrics speaks the Prometheus text format and counts requests by route and status', async (t) => {
  const { api } = await startTestNode(t)
  await api.get('/health')
  await api.get('/v1/nope')
  const res = await api.get('/metrics')
  assert.equal(res.status, 200)
  assert.match(res.headers.get('content-type') ?? '', /^text\/plain/)
  const text = res.body as string
  assert.match(text, /# TYPE meshnode_http_requests_total counter/)
  assert.match(text, /meshnode_http_requests_total\{method="GET",route="\/health",status="200"\} 1/)
  assert.match(text, /meshnode_http_requests_total\{method="GET",route="unmatched",status="404"\} 1/)
  assert.match(text, /meshnode_http_request_duration_seconds_bucket\{le="\+Inf",route="\/health"\} 1/)
})

/**
 * GET /metrics read as a Prometheus server reads it: the text format's content type, a `# TYPE` line before each
 * family's samples, every other line a sample. Samples by name and labels as written (`name{a="x",b="y"}`).
 */
async function scrape (api: Api): Promise<{ types: Map<string, string>, samples: Map<string, number> }> {
  const res = await api.get('/metrics')
  assert.equal(res.status, 200)
  assert.match(res.headers.get('content-type') ?? '', /^text\/plain; version=0\.0\.4; charset=utf-8$/)
  const types = new Map<string, string>()
  const samples = new Map<string, number>()
  let family: string | null = null
  for (const line of (res.body as string).split('\n')) {
    if (line === '' || line.startsWith('# HELP ')) continue
    const type = /^# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|histogram|summary|untyped)$/.exec(line)
    if (type != null) {
      types.set(type[1], type[2])
      family = type[1]
      continue
    }
    const sample = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*",?)*\})? (\S+)$/.exec(line)
    assert.ok(sample != null, `a sample line: ${line}`)
    assert.ok(family != null && [family, `${family}_bucket`, `${family}_sum`, `${family}_count`].includes(sample[1]), `${sample[1]} follows its # TYPE line`)
    const value = Number(sample[3])
    assert.ok(!Number.isNaN(value) || sample[3] === 'NaN', `${line} has a number`)
    samples.set(sample[1] + (sample[2] ?? ''), value)
  }
  return { types, samples }
}

test('GET /metrics shows each loaded model\'s slots and queue, each running download, and the process', async (t) => {
  const REPO = 'meshnode-test/metrics'
  const DOWNLOAD = `hf.co/${REPO}/tiny.gguf`
  const hub = await startFakeHub()
  t.after(() => hub.close())
  const file = await writeTinyGguf(join(await tempDir(t, 'meshnode-hub-files-'), 'tiny.gguf'), { seed: 9 })
  await hub.addFile(REPO, 'tiny.gguf', file.path)
  // A long context keeps the one slot generating while a second request waits for it.
  const { api, node, openai } = await startChatNode(t, { slots: 1, contextSize: 32_768, hfEndpoint: hub.url }, { contextLength: 32_768 })
  const loaded = `{model="${TINY_MODEL_ID}",kind="chat"}`
  const idle = await scrape(api)
  for (const name of ['meshnode_model_slots', 'meshnode_model_busy_slots', 'meshnode_model_queued_requests', 'meshnode_model_downloads_active',
    'meshnode_model_download_received_bytes', 'meshnode_model_download_size_bytes']) assert.equal(idle.types.get(name), 'gauge', name)
  assert.equal(idle.samples.get(`meshnode_model_slots${loaded}`), 1)
  assert.equal(idle.samples.get(`meshnode_model_busy_slots${loaded}`), 0)
  assert.equal(idle.samples.get(`meshnode_model_queued_requests${loaded}`), 0)
  assert.equal(idle.samples.get('meshnode_model_downloads_active'), 0)
  assert.equal(idle.types.get('nodejs_heap_size_used_bytes'), 'gauge', 'the process\'s own metrics')
  assert.equal(idle.types.get('process_cpu_seconds_total'), 'counter')

  // Greedy: the tiny model never picks end-of-generation then, so the request runs until it is aborted.
  const long = { model: TINY_MODEL_ID, messages: [{ role: 'user' as const, content: 'hi' }], max_tokens: 100_000, temperature: 0, stream: true as const }
  const running = new AbortController()
  const first = (await openai.chat.completions.create(long, { signal: running.signal }))[Symbol.asyncIterator]()
  await first.next() // the role chunk: the one slot is taken
  const waiting = new AbortController()
  const queued = fetch(`${node.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(long), signal: waiting.signal })
  hub.stallAfterBytes(100_000) // the transfer holds here until the node hangs up
  assert.equal((await api.post('/v1/app/models/download', { modelID: DOWNLOAD })).status, 200)

  const busy = await waitFor(async () => {
    const { samples } = await scrape(api)
    const received = samples.get(`meshnode_model_download_received_bytes{model="${DOWNLOAD}"}`) ?? 0
    const listed = ((await api.get('/v1/app/models')).body.models as Array<{ modelID: string, progress: { receivedBytes: number } | null }>)
      .find((m) => m.modelID === DOWNLOAD)?.progress?.receivedBytes
    return samples.get(`meshnode_model_queued_requests${loaded}`) === 1 && received > 0 && received === listed ? samples : undefined
  }, { what: 'the second request to queue and the download\'s bytes to arrive' })
  assert.equal(busy.get(`meshnode_model_slots${loaded}`), 1)
  assert.equal(busy.get(`meshnode_model_busy_slots${loaded}`), 1)
  assert.equal(busy.get('meshnode_model_downloads_active'), 1)
  assert.equal(busy.get(`meshnode_model_download_size_bytes{model="${DOWNLOAD}"}`), file.sizeBytes)

  running.abort()
  waiting.abort()
  await queued.catch(() => undefined)
  await waitFor(async () => {
    const { samples } = await scrape(api)
    return samples.get(`meshnode_model_busy_slots${loaded}`) === 0 && samples.get(`meshnode_model_queued_requests${loaded}`) === 0
  }, { what: 'the aborted requests to leave the slot and the queue' })
  assert.equal((await api.post('/v1/app/models/unload', { modelID: TINY_MODEL_ID })).status, 200)
  const after = await scrape(api)
  assert.ok(![...after.samples.keys()].some((key) => key.startsWith('meshnode_model_slots{')), 'an unloaded model has no series')
})

test('a 500 carries a request id and no stack or cause, and is logged once with that id', async (t) => {
  // The real app and error mapper, with a snapshot provider that fails the way a bug would.
  const lines: string[] = []
  const log = createLogger('info', new Writable({ write (chunk, _enc, done) { lines.push(String(chunk)); done() } }))
  const app = await bareHttpApp(t, { log, snapshot: () => { throw new Error('secret detail at /home/user/.meshnode') } })
  const res = await app.inject({ method: 'GET', url: '/v1/app', headers: { host: '127.0.0.1' } })
  assert.equal(res.statusCode, 500)
  const body = res.json()
  const requestID = res.headers['x-request-id'] as string
  assert.equal(body.error.type, 'internal_error')
  assert.equal(body.error.message, `internal error (request ${requestID})`)
  assert.ok(!res.body.includes('secret detail'), 'the cause stays out of the answer')
  assert.ok(!res.body.includes('at '), 'no stack frames')
  const logged = lines.filter((line) => line.includes('secret detail'))
  assert.equal(logged.length, 1, 'the cause is logged once')
  assert.ok(logged[0].includes(requestID), 'with the request id')
})
