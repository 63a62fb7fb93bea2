// The hub as the real one behaves, through a real node: rate limits told by `RateLimit` headers, renamed
// repos, errors by X-Error-Code, downloads pinned to a commit, and the default file of a repo named without a
// quantization. The fake hub reproduces each behaviour (test/support/fake-hub.ts).
import { test, type TestContext } from 'node:test'
import assert from 'node:assert/strict'
import { readFile } from 'node:fs/promises'
import { join } from 'node:path'
import { startFakeHub, type FakeHub } from '../support/fake-hub.ts'
import { downloaded, record, subscribe } from '../support/model-api.ts'
import { startTestNode, tempDir, waitFor, type TestNode } from '../support/node.ts'
import { writeTinyGguf, type TinyGguf } from '../support/tiny-gguf.ts'

const REPO = 'meshnode-test/tiny-GGUF'

async function hubWith (t: TestContext, files: Record<string, number>): Promise<{ hub: FakeHub, ggufs: Record<string, TinyGguf> }> {
  const hub = await startFakeHub()
  t.after(() => hub.close())
  const dir = await tempDir(t, 'meshnode-hub-files-')
  const ggufs: Record<string, TinyGguf> = {}
  for (const [name, seed] of Object.entries(files)) {
    ggufs[name] = await writeTinyGguf(join(dir, name), { seed })
    await hub.addFile(REPO, name, ggufs[name].path)
  }
  return { hub, ggufs }
}

async function nodeFor (t: TestContext, hub: FakeHub): Promise<TestNode> {
  // Quick retries, so a test does not wait out backoffs meant for the real internet
  return await startTestNode(t, { hfEndpoint: hub.url, hfToken: null })
}

test('a 429 with `RateLimit: …;t=5` and no Retry-After is waited out: progress says so, and the download completes', async (t) => {
  const { hub, ggufs } = await hubWith(t, { 'tiny.gguf': 1 })
  const node = await nodeFor(t, hub)
  const events = await subscribe(t, node.api)
  hub.failNext(429, { rateLimitResetSeconds: 5, on: 'cdn' })
  const modelID = `hf.co/${REPO}/tiny.gguf`
  assert.equal((await node.api.post('/v1/app/models/download', { modelID })).status, 200)
  const waiting = await waitFor(() => events.events.find((e) => e.event === 'download.progress' && e.data.message != null), { what: 'the rate-limit note' })
  assert.equal(waiting.data.message, 'rate limited, resuming in 5 s')
  await events.next('download.completed', modelID)
  await downloaded(node.api, modelID)
  assert.equal((await record(node.api, modelID)).progress, null)
  const bytes = await readFile(join(node.dataDir, 'models', 'meshnode-test', 'tiny-GGUF', 'tiny.gguf'))
  assert.ok(bytes.equals(await readFile(ggufs['tiny.gguf'].path)))
  assert.equal(hub.requests.filter((r) => r.server === 'cdn' && r.status === 429).length, 1)
})

test('a rate limit on the hub\'s API: a short one is waited out before answering; a long one is our 429 with Retry-After', async (t) => {
  const { hub } = await hubWith(t, { 'tiny-Q8_0.gguf': 1 })
  const node = await nodeFor(t, hub)
  hub.failNext(429, { rateLimitResetSeconds: 1, on: 'api' })
  const waited = await node.api.post('/v1/app/models/download', { modelID: `hf.co/${REPO}:Q8_0` })
  assert.equal(waited.status, 200)
  await downloaded(node.api, `hf.co/${REPO}:Q8_0`)

  hub.failNext(429, { rateLimitResetSeconds: 240, on: 'resolve' })
  const refused = await node.api.post('/v1/app/models/download', { modelID: `hf.co/${REPO}/tiny-Q8_0.gguf` })
  assert.equal(refused.status, 429)
  assert.equal(refused.body.error.type, 'rate_limit_error')
  assert.match(refused.body.error.message, /limiting our requests.*try again in 240 s/)
  assert.equal(refused.headers.get('retry-after'), '240')
  assert.equal(await record(node.api, `hf.co/${REPO}/tiny-Q8_0.gguf`), undefined, 'nothing was recorded')
})

test('a renamed repo: its relative 307 is followed, the file is verified by the X-Linked-* of the last hub hop, :QUANT works too', async (t) => {
  const { hub, ggufs } = await hubWith(t, { 'tiny-Q4_K_M.gguf': 2 })
  hub.renameRepo(REPO, 'meshnode-test/renamed-GGUF')
  const node = await nodeFor(t, hub)

  // The bytes are checked against the sha256 the hub announced after the rename: a flipped byte fails the download
  hub.corruptNext()
  const modelID = `hf.co/${REPO}/tiny-Q4_K_M.gguf`
  assert.equal((await node.api.post('/v1/app/models/download', { modelID })).status, 200)
  await waitFor(async () => (await record(node.api, modelID))?.status === 'failed', { what: 'the corrupted download to fail' })
  assert.match((await record(node.api, modelID)).error, /sha256/)
  assert.equal((await node.api.post('/v1/app/models/download', { modelID })).status, 200)
  await downloaded(node.api, modelID)
  assert.equal((await record(node.api, modelID)).sizeBytes, ggufs['tiny-Q4_K_M.gguf'].sizeBytes)
  assert.ok(hub.requests.some((r) => r.status === 307 && r.path.startsWith(`/${REPO}/resolve/`)), 'the old name was redirected')

  const quant = await node.api.post('/v1/app/models/download', { modelID: `hf.co/${REPO}:Q4_K_M` })
  assert.equal(quant.status, 409, 'the same file as the one just downloaded, by its listing under the new name')
  assert.match(quant.body.error.message, /same file/)
})

test('errors by X-Error-Code: a mistyped repo (401 RepoNotFound to an anonymous client) is a 404, not "gated"', async (t) => {
  const { hub } = await hubWith(t, { 'tiny.gguf': 1 })
  const node = await nodeFor(t, hub)
  for (const modelID of ['hf.co/meshnode-test/no-such-repo/tiny.gguf', 'hf.co/meshnode-test/no-such-repo:Q4_K_M', 'hf.co/meshnode-test/no-such-repo']) {
    const res = await node.api.post('/v1/app/models/download', { modelID })
    assert.equal(res.status, 404, modelID)
    assert.equal(res.body.error.type, 'not_found')
    assert.doesNotMatch(res.body.error.message, /gated|HF_TOKEN/)
  }
  assert.ok(hub.requests.some((r) => r.status === 401), 'the hub did answer 401')
  const noFile = await node.api.post('/v1/app/models/download', { modelID: `hf.co/${REPO}/other.gguf` })
  assert.equal(noFile.status, 404)
})

test('a download is pinned to the commit the first request saw: a new version pushed to main mid-download does not mix in', async (t) => {
  const { hub, ggufs } = await hubWith(t, { 'tiny.gguf': 3 })
  const node = await nodeFor(t, hub)
  const modelID = `hf.co/${REPO}/tiny.gguf`
  const first = hub.commitOf(REPO)
  const events = await subscribe(t, node.api)
  // The CDN is busy at first; while the download waits to try again, main gets another tiny.gguf
  hub.failNext(503, { retryAfterSeconds: 2, on: 'cdn' })
  assert.equal((await node.api.post('/v1/app/models/download', { modelID })).status, 200)
  await waitFor(() => hub.requests.some((r) => r.status === 503), { what: 'the download to wait for its next try' })
  await hub.addFile(REPO, 'tiny.gguf', (await writeTinyGguf(join(await tempDir(t), 'v2.gguf'), { seed: 4 })).path)
  assert.notEqual(hub.commitOf(REPO), first)
  await events.next('download.completed', modelID)
  const bytes = await readFile(join(node.dataDir, 'models', 'meshnode-test', 'tiny-GGUF', 'tiny.gguf'))
  assert.ok(bytes.equals(await readFile(ggufs['tiny.gguf'].path)), 'the bytes of the commit the download started on')
  const resolves = hub.requests.filter((r) => r.server === 'hub' && r.path.includes('/resolve/') && r.method === 'GET')
  assert.ok(resolves.length >= 2 && resolves.every((r) => r.path.includes(`/resolve/${first}/`)), 'every request named that commit')
})

test('hf.co/<org>/<repo> without a quantization: Q4_K_M, else Q8_0, else the first model file; sidecars are never chosen', async (t) => {
  const { hub } = await hubWith(t, { 'mmproj-tiny-Q4_K_M.gguf': 1, 'tiny-Q8_0.gguf': 2, 'tiny-Q6_K.gguf': 3 })
  const node = await nodeFor(t, hub)
  const res = await node.api.post('/v1/app/models/download', { modelID: `hf.co/${REPO}` })
  assert.deepEqual(res.body, { status: 'downloading', modelID: `hf.co/${REPO}` })
  await downloaded(node.api, `hf.co/${REPO}`)
  assert.equal((await record(node.api, `hf.co/${REPO}`)).source, `hf.co/${REPO}/tiny-Q8_0.gguf`)

  const other = 'meshnode-test/odd-GGUF'
  await hub.addFile(other, 'mtp-odd.gguf', (await writeTinyGguf(join(await tempDir(t), 'mtp.gguf'), { seed: 5 })).path)
  await hub.addFile(other, 'odd-IQ4_XS.gguf', (await writeTinyGguf(join(await tempDir(t), 'odd.gguf'), { seed: 6 })).path)
  assert.equal((await node.api.post('/v1/app/models/download', { modelID: `hf.co/${other}` })).status, 200)
  await downloaded(node.api, `hf.co/${other}`)
  assert.equal((await record(node.api, `hf.co/${other}`)).source, `hf.co/${other}/odd-IQ4_XS.gguf`)
})
