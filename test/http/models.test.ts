// The models API over real HTTP: a real node pointed at the fake hub (hfEndpoint), downloading the generated tiny
// GGUF with the production downloader, verifying it, and loading it into the real engine.
import OpenAI from 'openai'
import { test } from 'node:test'
import type { TestContext } from 'node:test'
import assert from 'node:assert/strict'
import { readdir, stat } from 'node:fs/promises'
import { join } from 'node:path'
import { startFakeHub, type FakeHub } from '../support/fake-hub.ts'
import { startTestNode, tempDir, waitFor, type Api, type TestNode } from '../support/node.ts'
import { writeTinyGguf, type TinyGguf } from '../support/tiny-gguf.ts'
import { exists } from '../support/files.ts'
import { downloaded, record, subscribe } from '../support/model-api.ts'

const REPO = 'meshnode-test/tiny-GGUF'
const MODEL = `hf.co/${REPO}/tiny.gguf`

interface Fixture { hub: FakeHub, node: TestNode, api: Api, gguf: TinyGguf, modelsDir: string }

/** A fake hub holding the tiny GGUF as `tiny.gguf` (and `files` more, by seed), and a node that downloads from it. */
async function fixture (t: TestContext, files: Record<string, number> = {}): Promise<Fixture> {
  const dir = await tempDir(t, 'meshnode-hub-files-')
  const hub = await startFakeHub()
  t.after(() => hub.close())
  const gguf = await writeTinyGguf(join(dir, 'tiny.gguf'))
  await hub.addFile(REPO, 'tiny.gguf', gguf.path)
  for (const [name, seed] of Object.entries(files)) {
    await hub.addFile(REPO, name, (await writeTinyGguf(join(dir, name), { seed })).path)
  }
  const node = await startTestNode(t, { hfEndpoint: hub.url })
  return { hub, node, api: node.api, gguf, modelsDir: join(node.dataDir, 'models') }
}

/** The GETs that fetched the file's bytes: the hub redirects LFS files to its CDN, which serves them by sha256. */
function fileGets (hub: FakeHub, gguf: TinyGguf): FakeHub['requests'] {
  return hub.requests.filter((r) => r.method === 'GET' && r.server === 'cdn' && r.path === `/cdn/${gguf.sha256}`)
}

test('download sends progress events, verifies the sha256, and the model loads, answers the openai client and unloads', async (t) => {
  const { api, gguf, modelsDir, hub } = await fixture(t)
  const stream = await subscribe(t, api)
  assert.ok(stream.comments.includes('connected') || (await waitFor(() => stream.comments.includes('connected'))))

  const res = await api.post('/v1/app/models/download', { modelID: `https://huggingface.co/${REPO}/resolve/main/tiny.gguf` })
  assert.equal(res.status, 200)
  assert.deepEqual(res.body, { status: 'downloading', modelID: MODEL })

  const completed = await stream.next('download.completed', MODEL)
  assert.deepEqual(completed.data, { modelID: MODEL, sizeBytes: gguf.sizeBytes, sha256: gguf.sha256 })
  const mine = stream.events.filter((e) => e.data.modelID === MODEL).map((e) => e.event)
  assert.equal(mine[0], 'download.started')
  assert.ok(mine.includes('download.progress'))
  assert.ok(mine.indexOf('download.verifying') > mine.indexOf('download.progress'), `order: ${mine.join(', ')}`)
  assert.equal(mine.at(-1), 'download.completed')
  const lastProgress = stream.events.filter((e) => e.event === 'download.progress').at(-1)?.data
  assert.equal(lastProgress.totalBytes, gguf.sizeBytes)
  assert.ok(lastProgress.receivedBytes > 0 && lastProgress.fraction > 0 && lastProgress.fraction <= 1)
  assert.deepEqual(Object.keys(lastProgress).sort(), ['bytesPerSecond', 'etaSeconds', 'fraction', 'message', 'modelID', 'receivedBytes', 'totalBytes'])

  const listed = await record(api, MODEL)
  assert.deepEqual(listed, {
    modelID: MODEL,
    name: 'tiny',
    family: 'tiny',
    parameters: null,
    quantization: null,
    sizeBytes: gguf.sizeBytes,
    contextLength: null,
    status: 'downloaded',
    progress: null,
    error: null,
    source: `hf.co/${REPO}/tiny.gguf`,
    loaded: null
  })
  const path = join(modelsDir, 'meshnode-test', 'tiny-GGUF', 'tiny.gguf')
  assert.equal((await stat(path)).size, gguf.sizeBytes)
  assert.equal(await exists(`${path}.part`), false)
  // A second call for a model already here answers at once and fetches nothing
  const requestsBefore = hub.requests.length
  assert.deepEqual((await api.post('/v1/app/models/download', { model_id: MODEL })).body, { status: 'downloaded', modelID: MODEL })
  assert.equal(hub.requests.length, requestsBefore)

  const load = await api.post('/v1/app/models/load', { model: MODEL.toUpperCase() })
  assert.equal(load.status, 200, JSON.stringify(load.body))
  assert.deepEqual(load.body, { status: 'loaded', modelID: MODEL, contextLength: load.body.contextLength })
  assert.ok(load.body.contextLength > 0)
  assert.deepEqual((await stream.next('model.loaded', MODEL)).data, { modelID: MODEL, contextLength: load.body.contextLength, reason: 'explicit' })
  const app = (await api.get('/v1/app')).body
  assert.deepEqual(app.model, { modelID: MODEL, status: 'loaded', contextLength: load.body.contextLength, gpu: { backend: 'cpu', gpuLayers: 0, totalLayers: app.model.gpu.totalLayers } })
  const inSnapshot = app.models.find((m: { modelID: string }) => m.modelID === MODEL)
  assert.equal(inSnapshot.status, 'loaded')
  assert.equal(inSnapshot.contextLength, 512, 'the GGUF\'s training context, known once loaded')

  // The downloaded, verified, loaded model answers through the official OpenAI client, streaming and not.
  const openai = new OpenAI({ baseURL: `${api.url}/v1`, apiKey: 'sk-unused', maxRetries: 0 })
  assert.deepEqual((await openai.models.list()).data.map((m) => [m.id, m.owned_by]), [[MODEL, 'local']])
  const messages = [{ role: 'user' as const, content: 'Tell me a story.' }]
  const whole = await openai.chat.completions.create({ model: MODEL, messages, max_tokens: 6, temperature: 0 })
  assert.equal(whole.usage?.completion_tokens, 6)
  let streamed = ''
  for await (const chunk of await openai.chat.completions.create({ model: MODEL, messages, max_tokens: 6, temperature: 0, stream: true })) {
    streamed += chunk.choices[0]?.delta.content ?? ''
  }
  assert.ok(streamed.length > 0)
  assert.equal(streamed, whole.choices[0].message.content)

  // Unload takes no body. A client that still says application/json with an empty body is answered the same.
  const unload = await api.post('/v1/app/models/unload')
  assert.equal(unload.status, 200, JSON.stringify(unload.body))
  assert.deepEqual(unload.body, { status: 'unloaded', modelID: MODEL, unloaded: [MODEL] })
  assert.deepEqual((await stream.next('model.unloaded', MODEL)).data, { modelID: MODEL, reason: 'explicit' })
  assert.equal((await api.get('/v1/app')).body.model, null)
  assert.equal((await record(api, MODEL)).status, 'downloaded')
  const again = await api.send('POST', '/v1/app/models/unload', undefined)
  assert.deepEqual([again.status, again.body], [200, { status: 'unloaded', modelID: null, unloaded: [] }])
})

test('a second download call joins the running one, and a restart mid-download resumes from the .part', async (t) => {
  const fx = await fixture(t)
  fx.hub.stallAfterBytes(200_000) // the first transfer holds here until the node hangs up
  const first = await fx.api.post('/v1/app/models/download', { modelID: MODEL })
  assert.deepEqual(first.body, { status: 'downloading', modelID: MODEL })
  await waitFor(async () => (await record(fx.api, MODEL))?.progress?.receivedBytes > 0, { what: 'bytes arriving' })
  const second = await fx.api.post('/v1/app/models/download', { modelID: `hf.co/${REPO.toLowerCase()}/TINY.gguf` })
  assert.deepEqual(second.body, { status: 'downloading', modelID: MODEL }, 'joined, under the first spelling')
  assert.equal(fileGets(fx.hub, fx.gguf).length, 1, 'the hub sees one download')
  const held = await record(fx.api, MODEL)
  assert.equal(held.status, 'downloading')
  assert.equal(held.progress.totalBytes, fx.gguf.sizeBytes)

  const restarted = await fx.node.restart() // closing aborts the stalled transfer and keeps the .part
  const part = join(fx.modelsDir, 'meshnode-test', 'tiny-GGUF', 'tiny.gguf.part')
  await downloaded(restarted.api, MODEL)
  const gets = fileGets(fx.hub, fx.gguf)
  assert.equal(gets.length, 2)
  assert.match(gets[1].range ?? '', /^bytes=[1-9]\d*-$/, 'the restarted node asked for the rest only')
  assert.equal(gets[1].status, 206)
  assert.equal(await exists(part), false)
  assert.equal((await record(restarted.api, MODEL)).sizeBytes, fx.gguf.sizeBytes)
})

test('concurrent download calls make one download; concurrent loads load each model once, side by side', async (t) => {
  const { api, hub, gguf } = await fixture(t, { 'b.gguf': 2 })
  const B = `hf.co/${REPO}/b.gguf`
  const stream = await subscribe(t, api)
  const answers = await Promise.all([MODEL, MODEL.toLowerCase(), MODEL, B].map(async (modelID) => await api.post('/v1/app/models/download', { modelID })))
  for (const answer of answers) {
    assert.equal(answer.status, 200)
    assert.ok(['downloading', 'downloaded'].includes(answer.body.status), answer.body.status)
  }
  assert.deepEqual(answers.map((a) => a.body.modelID), [MODEL, MODEL, MODEL, B])
  await downloaded(api, MODEL)
  await downloaded(api, B)
  assert.equal(fileGets(hub, gguf).length, 1, 'one transfer of the file')
  assert.deepEqual(stream.events.filter((e) => e.event === 'download.started').map((e) => e.data.modelID).sort(), [MODEL, B].sort())

  const loads = await Promise.all([MODEL, B, MODEL].map(async (modelID) => await api.post('/v1/app/models/load', { modelID })))
  assert.deepEqual(loads.map((l) => l.status), [200, 200, 200])
  const app = (await api.get('/v1/app')).body
  const loaded = app.models.filter((m: { status: string }) => m.status === 'loaded').map((m: { modelID: string }) => m.modelID)
  assert.deepEqual(loaded.sort(), [MODEL, B].sort())
  assert.ok(loaded.includes(app.model.modelID), 'the snapshot\'s model is one of them')
  assert.equal(stream.events.filter((e) => e.event === 'model.loaded').length, 2, 'each loaded once')
})

test('a connection dropped mid-file is resumed with a Range request', async (t) => {
  const { api, hub, gguf } = await fixture(t)
  hub.dropAfterBytes(300_000)
  assert.equal((await api.post('/v1/app/models/download', { modelID: MODEL })).status, 200)
  await downloaded(api, MODEL)
  const gets = fileGets(hub, gguf)
  assert.deepEqual(gets.map((r) => r.status), [200, 206])
  assert.equal(gets[0].range, null)
  // From where the bytes stopped arriving (the kernel may lose some of what the hub wrote before its reset)
  const resumedAt = Number(/^bytes=(\d+)-$/.exec(gets[1].range ?? '')?.[1])
  assert.ok(resumedAt > 0 && resumedAt <= 300_000, `resumed at ${gets[1].range}`)
  assert.equal((await record(api, MODEL)).sizeBytes, gguf.sizeBytes)
})

test('a corrupted byte fails verification: status failed with the reason, no file kept, and a retry succeeds', async (t) => {
  const { api, hub, gguf, modelsDir } = await fixture(t)
  const stream = await subscribe(t, api)
  hub.corruptNext()
  assert.equal((await api.post('/v1/app/models/download', { modelID: MODEL })).status, 200)

  const failed = await stream.next('download.failed', MODEL)
  assert.match(failed.data.error, new RegExp(`Integrity check of .* failed: expected sha256 ${gguf.sha256}, got [0-9a-f]{64}`))
  const listed = await record(api, MODEL)
  assert.deepEqual({ status: listed.status, error: listed.error, progress: listed.progress }, { status: 'failed', error: failed.data.error, progress: null })
  const dir = join(modelsDir, 'meshnode-test', 'tiny-GGUF')
  assert.deepEqual(await readdir(dir), [], 'neither the file nor its .part')
  const load = await api.post('/v1/app/models/load', { modelID: MODEL })
  assert.equal(load.status, 409)
  assert.match(load.body.error.message, /is not downloaded \(its download failed: Integrity check/)

  assert.equal((await api.post('/v1/app/models/download', { modelID: MODEL })).status, 200)
  await downloaded(api, MODEL)
  assert.equal((await record(api, MODEL)).error, null)
})

test('the storage budget refuses a download with 409 naming the sizes, and nothing changes', async (t) => {
  const { api, hub, gguf, modelsDir } = await fixture(t)
  assert.equal((await api.patch('/v1/app/settings', { max_storage_gb: 0.000001 })).status, 200)
  const before = (await api.get('/v1/app/models')).body

  const res = await api.post('/v1/app/models/download', { modelID: MODEL })
  assert.equal(res.status, 409)
  assert.equal(res.headers.get('x-should-retry'), 'false', 'what a retry cannot change: the SDKs are told not to')
  assert.equal(res.body.error.type, 'conflict')
  assert.match(res.body.error.message, new RegExp(`Storage budget exceeded: ${MODEL} needs 621\\.4 kB \\(${gguf.sizeBytes} bytes\\), ` +
    'max_storage_gb 0.000001 allows 1\\.0 kB \\(1000 bytes\\), downloaded models use 0 bytes, 1\\.0 kB \\(1000 bytes\\) free\\. ' +
    'Raise max_storage_gb, or turn on auto_manage_models'))
  assert.deepEqual((await api.get('/v1/app/models')).body, before)
  assert.equal(fileGets(hub, gguf).length, 0, 'refused on the size the hub announced, before any byte')
  assert.equal(await exists(modelsDir), false)

  // A file whose size nobody announces (a git file sent chunked) is stopped while streaming, at the free space
  await hub.addFile(REPO, 'unsized.gguf', gguf.path, { lfs: false, chunked: true })
  const unsized = `hf.co/${REPO}/unsized.gguf`
  const stream = await subscribe(t, api)
  assert.deepEqual((await api.post('/v1/app/models/download', { modelID: unsized })).body, { status: 'downloading', modelID: unsized })
  const failed = await stream.next('download.failed', unsized)
  assert.match(failed.data.error, /stopped: more than the limit of 1000 bytes received/)
  assert.equal((await record(api, unsized)).status, 'failed')
  assert.deepEqual(await readdir(join(modelsDir, 'meshnode-test', 'tiny-GGUF')), [], 'no partial file left')
})

test('with auto_manage_models on, least recently used models that are not loaded are evicted to make room', async (t) => {
  const { api, gguf, modelsDir } = await fixture(t, { 'b.gguf': 2, 'c.gguf': 3, 'd.gguf': 4 })
  const [a, b, c, d] = ['tiny.gguf', 'b.gguf', 'c.gguf', 'd.gguf'].map((file) => `hf.co/${REPO}/${file}`)
  const stream = await subscribe(t, api)
  const room = (2 * gguf.sizeBytes + 1000) / 1e9 // two models fit, a third does not
  assert.equal((await api.patch('/v1/app/settings', { max_storage_gb: room })).status, 200)
  for (const id of [a, b]) {
    assert.equal((await api.post('/v1/app/models/download', { modelID: id })).status, 200)
    await downloaded(api, id)
  }
  assert.equal((await api.post('/v1/app/models/load', { modelID: a })).status, 200)

  const refused = await api.post('/v1/app/models/download', { modelID: c })
  assert.equal(refused.status, 409, 'auto_manage_models is off: refused, nothing evicted')
  assert.match(refused.body.error.message, /downloaded models use 1\.2 MB \(1242816 bytes\)/)
  assert.equal((await record(api, b)).status, 'downloaded')

  assert.equal((await api.patch('/v1/app/settings', { auto_manage_models: true })).status, 200)
  assert.deepEqual((await api.post('/v1/app/models/download', { modelID: c })).body, { status: 'downloading', modelID: c })
  assert.deepEqual((await stream.next('model.evicted')).data, { modelID: b, sizeBytes: gguf.sizeBytes }, 'b, not the loaded a')
  await downloaded(api, c)
  assert.equal(await record(api, b), undefined, 'an evicted hub model leaves the list')
  assert.equal(await exists(join(modelsDir, 'meshnode-test', 'tiny-GGUF', 'b.gguf')), false)
  assert.equal((await record(api, a)).status, 'loaded')

  // Unloaded, a was used (loaded) before c was downloaded: it is now the least recently used
  assert.equal((await api.post('/v1/app/models/unload')).status, 200)
  assert.equal((await api.post('/v1/app/models/download', { modelID: d })).status, 200)
  await downloaded(api, d)
  assert.deepEqual(stream.events.filter((e) => e.event === 'model.evicted').map((e) => e.data.modelID), [b, a])
  assert.deepEqual((await api.get('/v1/app/models')).body.models.filter((m: { modelID: string }) => m.modelID.startsWith('hf.co/'))
    .map((m: { modelID: string, status: string }) => [m.modelID, m.status]), [[c, 'downloaded'], [d, 'downloaded']])
  assert.deepEqual((await readdir(join(modelsDir, 'meshnode-test', 'tiny-GGUF'))).sort(), ['c.gguf', 'd.gguf'])
})

test('a :QUANT reference resolves through the hub\'s file list; an unknown quantization is 404 naming the offered ones', async (t) => {
  const { api, hub, modelsDir } = await fixture(t, { 'tiny-F32.gguf': 5, 'tiny-Q8_0.gguf': 6 })
  const quant = `hf.co/${REPO}:f32`
  const res = await api.post('/v1/app/models/download', { modelID: quant })
  assert.deepEqual(res.body, { status: 'downloading', modelID: `hf.co/${REPO}:F32` })
  await downloaded(api, `hf.co/${REPO}:F32`)
  const listed = await record(api, `hf.co/${REPO}:F32`)
  assert.equal(listed.source, `hf.co/${REPO}/tiny-F32.gguf`)
  assert.equal(listed.quantization, 'F32')
  assert.ok(await exists(join(modelsDir, 'meshnode-test', 'tiny-GGUF', 'tiny-F32.gguf')))
  assert.ok(hub.requests.some((r) => r.path === `/api/models/${REPO}`))

  const missing = await api.post('/v1/app/models/download', { modelID: `hf.co/${REPO}:Q4_K_M` })
  assert.equal(missing.status, 404)
  assert.equal(missing.body.error.type, 'not_found')
  assert.equal(missing.body.error.message, `Model not found: hf.co/${REPO}:Q4_K_M (${REPO} has no Q4_K_M GGUF; it offers F32, Q8_0)`)
  const noRepo = await api.post('/v1/app/models/download', { modelID: 'hf.co/nobody/nothing:Q8_0' })
  assert.equal(noRepo.status, 404)
  assert.match(noRepo.body.error.message, /^Model not found: hf\.co\/nobody\/nothing:Q8_0 \(no repository nobody\/nothing on the hub\)$/)
  const noFile = await api.post('/v1/app/models/download', { modelID: `hf.co/${REPO}/none.gguf` })
  assert.equal(noFile.status, 404)
  assert.match(noFile.body.error.message, /^Model not found: hf\.co\/meshnode-test\/tiny-GGUF\/none\.gguf/)
})

test('a gated repo needs $HF_TOKEN: refused with 403 naming it without one, downloaded with it', async (t) => {
  const hub = await startFakeHub({ token: 'hf_secret' })
  t.after(() => hub.close())
  const gguf = await writeTinyGguf(join(await tempDir(t), 'tiny.gguf'))
  await hub.addFile(REPO, 'tiny.gguf', gguf.path)
  const anonymous = await startTestNode(t, { hfEndpoint: hub.url, hfToken: null })
  const refused = await anonymous.api.post('/v1/app/models/download', { modelID: MODEL })
  assert.equal(refused.status, 403)
  assert.equal(refused.body.error.type, 'permission_error')
  assert.match(refused.body.error.message, /refused access to meshnode-test\/tiny-GGUF\/tiny\.gguf \(HTTP 401\).*set \$HF_TOKEN/)
  assert.equal(await record(anonymous.api, MODEL), undefined)

  const member = await startTestNode(t, { hfEndpoint: hub.url, hfToken: 'hf_secret' })
  assert.equal((await member.api.post('/v1/app/models/download', { modelID: MODEL })).status, 200)
  await downloaded(member.api, MODEL)
  assert.ok(hub.requests.filter((r) => r.server === 'cdn').every((r) => r.authorization == null), 'the token never goes to the CDN')
})

test('bad bodies, unsafe ids, unknown models and loads before download are refused and change nothing', async (t) => {
  const { api, hub, modelsDir } = await fixture(t)
  const before = (await api.get('/v1/app/models')).body
  const snapshotBefore = (await api.get('/v1/app')).body.model

  const cases: Array<[string, unknown, number, string, string | null, RegExp]> = [
    ['download', {}, 400, 'invalid_request_error', 'modelID', /modelID/],
    ['download', { modelID: 123 }, 400, 'invalid_request_error', 'modelID', /modelID/],
    ['download', { modelID: '' }, 400, 'invalid_request_error', 'modelID', /modelID/],
    ['download', { modelID: 'x'.repeat(300) }, 400, 'invalid_request_error', 'modelID', /modelID/],
    ['download', [MODEL], 400, 'invalid_request_error', null, /Invalid body/],
    ['download', { modelID: 'hf.co/meshnode-test/tiny-GGUF/../../../../etc/passwd.gguf' }, 400, 'invalid_request_error', 'modelID', /\. or \.\. segments/],
    ['download', { modelID: 'hf.co/../tiny-GGUF/x.gguf' }, 400, 'invalid_request_error', 'modelID', /not a hub user or repo name/],
    ['download', { modelID: '/etc/passwd' }, 400, 'invalid_request_error', 'modelID', /use a catalog id/],
    ['download', { modelID: 'hf.co/a/b/c\\..\\d.gguf' }, 400, 'invalid_request_error', 'modelID', /backslash/],
    ['download', { modelID: 'hf.co/a/b/c\u0000.gguf' }, 400, 'invalid_request_error', 'modelID', /control characters/],
    ['download', { modelID: 'qwen-7b' }, 404, 'not_found', null, /^Model not found: qwen-7b /],
    ['load', {}, 400, 'invalid_request_error', 'modelID', /modelID/],
    ['load', { modelID: false }, 400, 'invalid_request_error', 'modelID', /modelID/],
    ['load', { modelID: 'qwen-7b' }, 404, 'not_found', null, /^Model not found: qwen-7b /],
    ['load', { modelID: 'hf.co/x/y/../z.gguf' }, 400, 'invalid_request_error', 'modelID', /\. or \.\. segments/],
    ['load', { modelID: 'SmolLM2-135M-Instruct-Q8_0' }, 409, 'conflict', null, /^Model smollm2-135m-instruct-q8_0 is not downloaded \(never downloaded\)/],
    ['load', { model_id: MODEL }, 409, 'conflict', null, /is not downloaded/]
  ]
  for (const [action, body, status, type, param, message] of cases) {
    const res = await api.post(`/v1/app/models/${action}`, body)
    const what = `${action} ${JSON.stringify(body).slice(0, 80)}`
    assert.equal(res.status, status, `${what}: ${JSON.stringify(res.body)}`)
    assert.equal(res.body.error.type, type, what)
    assert.equal(res.body.error.param, param, what)
    assert.match(res.body.error.message, message, what)
  }
  const malformed = await api.send('POST', '/v1/app/models/load', '{"modelID":', { 'content-type': 'application/json' })
  assert.equal(malformed.status, 400)
  const malformedUnload = await api.send('POST', '/v1/app/models/unload', '{', { 'content-type': 'application/json' })
  assert.equal(malformedUnload.status, 400)

  assert.deepEqual((await api.get('/v1/app/models')).body, before)
  assert.deepEqual((await api.get('/v1/app')).body.model, snapshotBefore)
  assert.equal(hub.requests.length, 0, 'nothing reached the hub')
  assert.equal(await exists(modelsDir), false, 'nothing was written')
})

test('the last loaded model is loaded again after a restart; after an unload it is not', async (t) => {
  const fx = await fixture(t)
  assert.equal((await fx.api.post('/v1/app/models/download', { modelID: MODEL })).status, 200)
  await downloaded(fx.api, MODEL)
  assert.equal((await fx.api.post('/v1/app/models/load', { modelID: MODEL })).status, 200)

  const restarted = await fx.node.restart()
  const model = await waitFor(async () => {
    const app = (await restarted.api.get('/v1/app')).body
    return app.model?.status === 'loaded' ? app.model : undefined
  }, { what: 'the model reloaded' })
  assert.equal(model.modelID, MODEL)
  assert.equal(restarted.node.engine.loaded()?.modelID, MODEL)

  assert.equal((await restarted.api.post('/v1/app/models/unload')).status, 200)
  const again = await restarted.restart()
  assert.equal((await again.api.get('/v1/app')).body.model, null)
  assert.equal(again.node.engine.loaded(), null)
})

test('the events stream ends when the node closes, and a catalog model is listed as available', async (t) => {
  const { node, api } = await fixture(t)
  const listed = await record(api, 'smollm2-135m-instruct-q8_0')
  assert.deepEqual(listed, {
    modelID: 'smollm2-135m-instruct-q8_0',
    name: 'SmolLM2 135M Instruct',
    family: 'smollm2',
    parameters: '135M',
    quantization: 'Q8_0',
    sizeBytes: 145_000_000,
    contextLength: 8192,
    status: 'available',
    progress: null,
    error: null,
    source: 'hf.co/HuggingFaceTB/SmolLM2-135M-Instruct-GGUF/smollm2-135m-instruct-q8_0.gguf',
    loaded: null
  })
  const stream = await subscribe(t, api)
  await node.node.close() // would hang if the open stream kept the server from closing
  await stream.ended
})
