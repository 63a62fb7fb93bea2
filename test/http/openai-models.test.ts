// Models as clients see them: /v1/models lists what is downloaded as well as what is loaded, a request
// loads the model it names (swapping out the current one once its generations finish), and a model nobody has is a
// 404 naming it, in every OpenAI endpoint.
import type { NodeConfig } from '../../src/config.ts'
import { test } from 'node:test'
import type { TestContext } from 'node:test'
import assert from 'node:assert/strict'
import { join } from 'node:path'
import OpenAI from 'openai'
import { startFakeHub } from '../support/fake-hub.ts'
import { startTestNode, tempDir, waitFor, type TestNode } from '../support/node.ts'
import { writeTinyGguf } from '../support/tiny-gguf.ts'

const REPO = 'meshnode-test/swap-GGUF'
const FIRST = `hf.co/${REPO}/first.gguf`
const SECOND = `hf.co/${REPO}/second.gguf`
const hello = [{ role: 'user' as const, content: 'Tell me about the network.' }]

/** A node with two tiny GGUFs downloaded through the fake hub, neither loaded. */
async function nodeWithTwoModels (t: TestContext, config: Partial<NodeConfig> = {}): Promise<{ node: TestNode, openai: OpenAI }> {
  const dir = await tempDir(t, 'meshnode-hub-files-')
  const hub = await startFakeHub()
  t.after(() => hub.close())
  // Different seeds, so the two models answer differently and a test can tell which one did.
  await hub.addFile(REPO, 'first.gguf', (await writeTinyGguf(join(dir, 'first.gguf'), { seed: 11, contextLength: 2048 })).path)
  await hub.addFile(REPO, 'second.gguf', (await writeTinyGguf(join(dir, 'second.gguf'), { seed: 12, contextLength: 2048 })).path)
  const node = await startTestNode(t, { hfEndpoint: hub.url, ...config })
  for (const modelID of [FIRST, SECOND]) assert.equal((await node.api.post('/v1/app/models/download', { modelID })).status, 200)
  await waitFor(async () => {
    const { body } = await node.api.get('/v1/app/models')
    return [FIRST, SECOND].every((id) => body.models.some((m: { modelID: string, status: string }) => m.modelID === id && m.status === 'downloaded'))
  }, { what: 'both models downloaded' })
  return { node, openai: new OpenAI({ baseURL: `${node.node.url}/v1`, apiKey: 'x', maxRetries: 0, timeout: 120_000 }) }
}

test('/v1/models lists downloaded models; a chat naming one loads it; with room for one, naming another swaps it in after the running generation', async (t) => {
  const { node, openai } = await nodeWithTwoModels(t, { maxLoadedModels: 1 })
  const listed = await openai.models.list()
  assert.deepEqual(listed.data.map((m) => [m.id, m.owned_by]).sort(), [[FIRST, 'local'], [SECOND, 'local']])
  assert.equal(node.node.engine.loaded(), null, 'listing loads nothing')
  const retrieved = await openai.models.retrieve(FIRST) // the SDK percent-encodes the slashes
  assert.deepEqual({ id: retrieved.id, object: retrieved.object, owned_by: retrieved.owned_by }, { id: FIRST, object: 'model', owned_by: 'local' })
  assert.equal((await node.api.get(`/v1/models/${FIRST}`)).body.id, FIRST, 'raw slashes work too, as curl sends them')

  // The first request for FIRST loads it, announced as any load is.
  const loadedEvents: string[] = []
  node.node.models.events.on('model.loaded', ({ modelID }) => { loadedEvents.push(modelID) })
  const { data: first, response } = await openai.chat.completions.create({ model: FIRST, messages: hello, max_tokens: 6, temperature: 0 }).withResponse()
  assert.equal(response.headers.get('x-served-by'), 'local')
  assert.equal(first.usage?.completion_tokens, 6)
  assert.deepEqual(loadedEvents, [FIRST])
  assert.deepEqual((await node.api.get('/v1/app')).body.model, { modelID: FIRST, status: 'loaded', contextLength: 2048, gpu: { backend: 'cpu', gpuLayers: 0, totalLayers: 3 } })

  // A long generation on FIRST is running when SECOND is asked for: it runs to its end, then SECOND is swapped in.
  const long = openai.chat.completions.create({ model: FIRST, messages: hello, max_tokens: 300, temperature: 0 })
  await waitFor(() => node.node.engine.stats().busySlots === 1, { what: 'the long generation to start' })
  const second = openai.chat.completions.create({ model: SECOND, messages: hello, max_tokens: 6, temperature: 0 })
  // The snapshot shows SECOND loading while FIRST, still loaded, finishes its generation.
  await waitFor(async () => (await node.api.get('/v1/app')).body.model?.status === 'loading', { what: 'the swap to SECOND to start' })
  assert.deepEqual((await node.api.get('/v1/app')).body.model, { modelID: SECOND, status: 'loading', contextLength: null, gpu: null })
  assert.equal(node.node.engine.loaded()?.modelID, FIRST, 'no swap while FIRST still generates')
  assert.equal(node.node.engine.stats().busySlots, 1)
  assert.equal((await long).usage?.completion_tokens, 300, 'the running generation was not cut')
  const answer = await second
  assert.equal(answer.usage?.completion_tokens, 6)
  assert.equal(node.node.engine.loaded()?.modelID, SECOND)
  assert.deepEqual(loadedEvents, [FIRST, SECOND])
  assert.notEqual(answer.choices[0].message.content, first.choices[0].message.content, 'another model, another answer')
  assert.deepEqual((await node.api.get('/v1/app')).body.model, { modelID: SECOND, status: 'loaded', contextLength: 2048, gpu: { backend: 'cpu', gpuLayers: 0, totalLayers: 3 } })

  // Concurrent requests for the model not loaded load it once, and all are answered by it.
  const both = await Promise.all([1, 2, 3].map(async () => await openai.chat.completions.create({ model: FIRST, messages: hello, max_tokens: 6, temperature: 0 })))
  assert.ok(both.every((c) => c.choices[0].message.content === first.choices[0].message.content))
  assert.deepEqual(loadedEvents, [FIRST, SECOND, FIRST])
})

test('a model neither here nor on a peer is 404 not_found naming it, in chat, completions, embeddings and retrieve', async (t) => {
  const node = await startTestNode(t)
  const openai = new OpenAI({ baseURL: `${node.node.url}/v1`, apiKey: 'x', maxRetries: 0 })
  const model = 'hf.co/acme/never-downloaded:Q4_K_M'
  const attempts: Array<[string, () => Promise<unknown>]> = [
    ['chat', async () => await openai.chat.completions.create({ model, messages: hello })],
    ['chat stream', async () => await openai.chat.completions.create({ model, messages: hello, stream: true })],
    ['completions', async () => await openai.completions.create({ model, prompt: 'Once' })],
    ['embeddings', async () => await openai.embeddings.create({ model, input: 'Once' })],
    ['retrieve', async () => await openai.models.retrieve(model)]
  ]
  for (const [what, attempt] of attempts) {
    await assert.rejects(attempt, (err: unknown) => {
      assert.ok(err instanceof OpenAI.NotFoundError, `${what}: ${String(err)}`)
      assert.equal((err.error as { type?: string }).type, 'not_found')
      assert.ok(err.message.includes(model), `${what}: ${err.message}`)
      assert.ok(err.message.includes(`meshnode models download ${model}`), `${what}: ${err.message}`)
      return true
    })
  }
  // A name neither the catalog nor the hub can resolve is not offered as a download, which would only fail
  for (const name of ['gpt-4o', 'acme/never-downloaded:Q4_K_M']) {
    await assert.rejects(openai.chat.completions.create({ model: name, messages: hello }), (err: unknown) => {
      assert.ok(err instanceof OpenAI.NotFoundError, String(err))
      assert.ok(!err.message.includes('meshnode models download'), err.message)
      assert.match(err.message, /`meshnode models list` shows the models you can download/)
      return true
    })
  }
})

test('/openapi.json documents every OpenAI endpoint with its request and response schemas', async (t) => {
  const { api } = await startTestNode(t)
  const { body: doc } = await api.get('/openapi.json')
  for (const path of ['/v1/chat/completions', '/v1/completions', '/v1/embeddings', '/v1/tokenize', '/v1/detokenize']) {
    const post = doc.paths[path]?.post
    assert.ok(post != null, `${path} documented`)
    assert.ok(post.requestBody?.content?.['application/json']?.schema != null, `${path} has its request schema`)
    assert.ok(post.responses['200'] != null && post.responses['400'] != null && post.responses['404'] != null, `${path} has its answers`)
  }
  assert.ok(doc.paths['/v1/models']?.get?.responses['200'] != null)
  const retrieve = Object.entries(doc.paths as Record<string, { get?: { responses: Record<string, unknown> } }>).find(([path]) => path.startsWith('/v1/models/'))
  assert.ok(retrieve?.[1].get?.responses['404'] != null, 'GET /v1/models/{id} documented')
  const chat = JSON.stringify(doc.paths['/v1/chat/completions'].post)
  for (const field of ['tools', 'tool_choice', 'parallel_tool_calls', 'logit_bias', 'tool_calls', 'tool_call_id']) assert.ok(chat.includes(`"${field}"`), `chat documents ${field}`)
})
