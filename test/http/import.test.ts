// A GGUF the user already has, registered in place (POST /v1/app/models/import), loaded, and served here
// and to peers; it is never copied, never evicted and not counted against max_storage_gb.
import OpenAI from 'openai'
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { mkdir, readdir, stat, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { startFakeHub } from '../support/fake-hub.ts'
import { startTestNode, tempDir, waitFor } from '../support/node.ts'
import { startTestRelay, startWanNode, waitForPeers } from '../support/network.ts'
import { writeTinyGguf } from '../support/tiny-gguf.ts'
import { exists } from '../support/files.ts'

const hello = [{ role: 'user' as const, content: 'Hello' }]

test('an imported GGUF is listed in place, loads, answers the openai client, and is loaded again after a restart', async (t) => {
  const outside = await tempDir(t, 'meshnode-user-models-')
  const gguf = await writeTinyGguf(join(outside, 'My Tiny-Model 1B.Q8_0.gguf'), { seed: 3 })
  const node = await startTestNode(t)

  const res = await node.api.post('/v1/app/models/import', { path: gguf.path })
  assert.equal(res.status, 200, JSON.stringify(res.body))
  const record = {
    modelID: 'my-tiny-model-1b.q8_0',
    name: 'My Tiny-Model 1B.Q8_0',
    family: null,
    parameters: '1B',
    quantization: 'Q8_0',
    sizeBytes: gguf.sizeBytes,
    contextLength: null,
    status: 'downloaded',
    progress: null,
    error: null,
    source: `file:${gguf.path}`,
    loaded: null
  }
  assert.deepEqual(res.body, record)
  assert.deepEqual((await node.api.get('/v1/app/models')).body.models.at(-1), record)
  assert.equal(await exists(join(node.dataDir, 'models')), false, 'nothing was copied into the data dir')

  const load = await node.api.post('/v1/app/models/load', { modelID: 'My-Tiny-Model-1B.Q8_0' })
  assert.equal(load.status, 200, JSON.stringify(load.body))
  assert.equal(load.body.modelID, 'my-tiny-model-1b.q8_0')
  const openai = new OpenAI({ baseURL: `${node.node.url}/v1`, apiKey: 'unused', maxRetries: 0 })
  assert.deepEqual((await openai.models.list()).data.map((m) => [m.id, m.owned_by]), [['my-tiny-model-1b.q8_0', 'local']])
  const answer = await openai.chat.completions.create({ model: 'my-tiny-model-1b.q8_0', messages: hello, max_tokens: 4, temperature: 0 })
  assert.equal(answer.usage?.completion_tokens, 4)
  const listed = (await node.api.get('/v1/app/models')).body.models.at(-1)
  assert.deepEqual([listed.status, listed.contextLength], ['loaded', 512])

  const again = await node.restart()
  await waitFor(async () => (await again.api.get('/v1/app')).body.model?.status === 'loaded', { what: 'the imported model to be reloaded' })
  assert.equal((await again.api.get('/v1/app')).body.model.modelID, 'my-tiny-model-1b.q8_0')
  assert.equal((await stat(gguf.path)).size, gguf.sizeBytes, 'the file is where it was')
})

test('imported files count against no budget and are never evicted; a chosen id, re-imports and conflicts', async (t) => {
  const outside = await tempDir(t, 'meshnode-user-models-')
  const mine = await writeTinyGguf(join(outside, 'mine.gguf'), { seed: 4 })
  const hub = await startFakeHub()
  t.after(() => hub.close())
  const repo = 'meshnode-test/tiny-GGUF'
  const hubFiles = await tempDir(t, 'meshnode-hub-files-')
  for (const [file, seed] of [['a.gguf', 5], ['b.gguf', 6]] as const) await hub.addFile(repo, file, (await writeTinyGguf(join(hubFiles, file), { seed })).path)
  const node = await startTestNode(t, { hfEndpoint: hub.url })
  const { api } = node

  const imported = await api.post('/v1/app/models/import', { path: mine.path, model_id: 'Team-Model' })
  assert.equal(imported.status, 200, JSON.stringify(imported.body))
  assert.equal(imported.body.modelID, 'Team-Model')
  assert.deepEqual((await api.post('/v1/app/models/import', { path: mine.path, modelID: 'team-model' })).body, imported.body, 'the same again is the same record')
  assert.deepEqual((await api.post('/v1/app/models/download', { modelID: 'team-model' })).body, { status: 'downloaded', modelID: 'Team-Model' })

  // Room for exactly one hub model: the imported file, as large, is not counted
  assert.equal((await api.patch('/v1/app/settings', { max_storage_gb: (mine.sizeBytes + 1000) / 1e9, auto_manage_models: true })).status, 200)
  const [a, b] = [`hf.co/${repo}/a.gguf`, `hf.co/${repo}/b.gguf`]
  assert.equal((await api.post('/v1/app/models/download', { modelID: a })).status, 200)
  await waitFor(async () => (await api.get('/v1/app/models')).body.models.find((m: { modelID: string }) => m.modelID === a)?.status === 'downloaded', { what: 'a downloaded' })
  assert.equal((await api.post('/v1/app/models/download', { modelID: b })).status, 200, 'b evicts a, never the imported file')
  await waitFor(async () => (await api.get('/v1/app/models')).body.models.find((m: { modelID: string }) => m.modelID === b)?.status === 'downloaded', { what: 'b downloaded' })
  const ids = (await api.get('/v1/app/models')).body.models.filter((m: { status: string }) => m.status === 'downloaded').map((m: { modelID: string }) => m.modelID)
  assert.deepEqual(ids, [b, 'Team-Model'])
  assert.equal((await stat(mine.path)).size, mine.sizeBytes)

  // Refusals: each a clear envelope, and nothing changes
  const before = (await api.get('/v1/app/models')).body
  const other = await writeTinyGguf(join(outside, 'other.gguf'), { seed: 8 })
  const notGguf = join(outside, 'notes.gguf')
  await writeFile(notGguf, 'just some text, not a model\n')
  await mkdir(join(outside, 'folder.gguf'))
  const cases: Array<[unknown, number, string, RegExp]> = [
    [{ path: join(outside, 'missing.gguf') }, 404, 'not_found', /No file at .*missing\.gguf/],
    [{ path: notGguf }, 400, 'invalid_request_error', /notes\.gguf is not a GGUF file/],
    [{ path: join(outside, 'folder.gguf') }, 400, 'invalid_request_error', /folder\.gguf is not a file/],
    // Special files: a device, and one that stat calls a regular file but no read can serve (EIO)
    [{ path: '/dev/zero' }, 400, 'invalid_request_error', /\/dev\/zero is not a file/],
    [{ path: '/proc/self/mem' }, 400, 'invalid_request_error', /\/proc\/self\/mem cannot be read by the node \(EIO\)/],
    [{ path: 'relative/model.gguf' }, 400, 'invalid_request_error', /path must be absolute/],
    [{ path: `${outside}/x\u0000.gguf` }, 400, 'invalid_request_error', /NUL/],
    [{}, 400, 'invalid_request_error', /path/],
    [{ path: 42 }, 400, 'invalid_request_error', /path/],
    [{ path: 'x'.repeat(5000) }, 400, 'invalid_request_error', /path/],
    [{ path: other.path, modelID: 'team-model' }, 409, 'conflict', /Team-Model is already imported from .*mine\.gguf/],
    [{ path: mine.path, modelID: 'renamed' }, 409, 'conflict', /mine\.gguf is already imported as Team-Model/],
    [{ path: other.path, modelID: 'smollm2-135m-instruct-q8_0' }, 409, 'conflict', /catalog model's id/],
    [{ path: other.path, modelID: 'hf.co/org/repo/file.gguf' }, 400, 'invalid_request_error', /plain name/],
    [{ path: other.path, modelID: '../etc' }, 400, 'invalid_request_error', /modelID/]
  ]
  await Promise.all(cases.map(async ([body, status, type, message]) => {
    const res = await api.post('/v1/app/models/import', body)
    assert.equal(res.status, status, `${JSON.stringify(body).slice(0, 80)}: ${JSON.stringify(res.body)}`)
    assert.equal(res.body.error.type, type)
    assert.match(res.body.error.message, message)
  }))
  assert.deepEqual((await api.get('/v1/app/models')).body, before)
  assert.deepEqual((await readdir(outside)).sort(), ['folder.gguf', 'mine.gguf', 'notes.gguf', 'other.gguf'])
  assert.equal((await api.post('/v1/app/models/load', { modelID: 'never-imported' })).status, 404)
})

test('a peer asks for an imported model by its id and this node serves it', async (t) => {
  const relay = await startTestRelay(t)
  const [owner, asker] = await Promise.all([startWanNode(t, relay), startWanNode(t, relay)])
  const gguf = await writeTinyGguf(join(await tempDir(t, 'meshnode-user-models-'), 'shared.gguf'), { seed: 9 })
  assert.equal((await owner.api.post('/v1/app/models/import', { path: gguf.path })).status, 200)
  assert.equal((await owner.api.post('/v1/app/models/load', { modelID: 'shared' })).status, 200)
  await waitForPeers(asker, [owner.nodeID])
  await waitFor(() => asker.node.network.peer(owner.nodeID)?.record.models.loaded === 'shared', { what: 'the owner to advertise the imported model' })

  const openai = new OpenAI({ baseURL: `${asker.node.url}/v1`, apiKey: 'unused', maxRetries: 0 })
  const { data, response } = await openai.chat.completions.create({ model: 'shared', messages: hello, max_tokens: 4, temperature: 0 }).withResponse()
  assert.equal(response.headers.get('x-served-by'), `peer:${owner.nodeID}`)
  assert.equal(data.usage?.completion_tokens, 4)
})

test('loading the loaded model is a no-op and its stream goes on; another loads beside it without waiting for the stream', async (t) => {
  const outside = await tempDir(t, 'meshnode-user-models-')
  const first = await writeTinyGguf(join(outside, 'first.gguf'), { seed: 3, contextLength: 4096 })
  const second = await writeTinyGguf(join(outside, 'second.gguf'), { seed: 4, contextLength: 4096 })
  const node = await startTestNode(t, { contextSize: 4096 })
  for (const gguf of [first, second]) assert.equal((await node.api.post('/v1/app/models/import', { path: gguf.path })).status, 200)
  assert.equal((await node.api.post('/v1/app/models/load', { modelID: 'first' })).status, 200)
  const order: string[] = []
  /** A long answer (the tiny model never ends one itself), read to its end; resolves with its last chunk. */
  const longStream = async (): Promise<{ finishReason: string | null, errors: string[] }> => {
    const res = await fetch(`${node.node.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'first', messages: hello, max_tokens: 3000, stream: true })
    })
    assert.equal(res.status, 200)
    const text = await res.text()
    order.push('stream done')
    const data = text.split('\n').filter((line) => line.startsWith('data: {')).map((line) => JSON.parse(line.slice(6)))
    return { finishReason: data.at(-1)?.choices?.[0]?.finish_reason ?? null, errors: data.filter((d) => d.error != null).map((d) => d.error.message) }
  }

  const same = longStream()
  await waitFor(() => node.node.engine.stats().busySlots > 0 || order.length > 0, { what: 'the stream to run' })
  const reload = await node.api.post('/v1/app/models/load', { modelID: 'first' })
  order.push('load done')
  assert.deepEqual(reload.body, { status: 'loaded', modelID: 'first', contextLength: 4096 })
  assert.deepEqual(await same, { finishReason: 'length', errors: [] })
  assert.deepEqual(order, ['load done', 'stream done'], 'the load answered while the stream ran on')

  order.length = 0
  const other = longStream()
  await waitFor(() => node.node.engine.stats().busySlots > 0 || order.length > 0, { what: 'the stream to run' })
  const beside = await node.api.post('/v1/app/models/load', { modelID: 'second' })
  order.push('load done')
  assert.equal(beside.status, 200, JSON.stringify(beside.body))
  assert.deepEqual(await other, { finishReason: 'length', errors: [] })
  assert.deepEqual(order, ['load done', 'stream done'], 'another model loads beside the first while its stream runs on')
  assert.deepEqual(node.node.engine.loadedModels().map((model) => model.modelID).sort(), ['first', 'second'])
})
