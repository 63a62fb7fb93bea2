// Several models through the node, as an application uses them: a chat model and an embedding model imported, loaded
// on first use, answering interleaved and at once; listed with what each is doing; unloaded one by one or all; and
// served to a peer side by side.
import { test, type TestContext } from 'node:test'
import assert from 'node:assert/strict'
import { join } from 'node:path'
import OpenAI from 'openai'
import { startTestNode, tempDir, waitFor, type TestNode } from '../support/node.ts'
import { FAST_NETWORK, startTestRelay, waitForPeers, wanSettings } from '../support/network.ts'
import { writeTinyGguf } from '../support/tiny-gguf.ts'

interface Listed { modelID: string, status: string, loaded: null | { kind: string, memoryBytes: number, contextLength: number, slots: number, busySlots: number, queued: number, loadedBy: string, idleSeconds: number } }

function openaiFor (node: TestNode): OpenAI {
  return new OpenAI({ baseURL: `${node.node.url}/v1`, apiKey: 'sk-local-dummy', maxRetries: 0, timeout: 300_000 })
}

/** A node with a chat model and an embedding model imported in place, neither loaded. */
async function nodeWithTwoModels (t: TestContext, node?: TestNode): Promise<{ node: TestNode, chat: string, embed: string, events: Array<{ event: string, data: { modelID: string, reason?: string } }> }> {
  const dir = await tempDir(t, 'meshnode-models-')
  const chatFile = await writeTinyGguf(join(dir, 'chat-model.gguf'), { seed: 3, contextLength: 2048 })
  const embedFile = await writeTinyGguf(join(dir, 'embed-model.gguf'), { seed: 4, pooling: true })
  node ??= await startTestNode(t)
  const chat = (await node.api.post('/v1/app/models/import', { path: chatFile.path, modelID: 'chat-model' })).body.modelID as string
  const embed = (await node.api.post('/v1/app/models/import', { path: embedFile.path, modelID: 'embed-model' })).body.modelID as string
  const events: Array<{ event: string, data: { modelID: string, reason?: string } }> = []
  node.node.models.events.on('model.loaded', (data) => { events.push({ event: 'model.loaded', data }) })
  node.node.models.events.on('model.unloaded', (data) => { events.push({ event: 'model.unloaded', data }) })
  return { node, chat, embed, events }
}

async function listed (node: TestNode): Promise<Listed[]> {
  return (await node.api.get('/v1/app/models')).body.models as Listed[]
}

test('an embeddings request for one model is answered while a chat on another streams; both stay loaded, listed with what each does', async (t) => {
  const { node, chat, embed, events } = await nodeWithTwoModels(t)
  const openai = openaiFor(node)
  const stream = await openai.chat.completions.create({ model: chat, messages: [{ role: 'user', content: 'Tell me a long story.' }], max_tokens: 400, temperature: 0, stream: true })
  const chunks = stream[Symbol.asyncIterator]()
  const first = await chunks.next()
  assert.equal(first.done, false)
  let chatEnded = false
  const rest = (async () => {
    let finish: string | null = null
    let tokens = 0
    for (let next = await chunks.next(); next.done !== true; next = await chunks.next()) {
      finish = next.value.choices[0]?.finish_reason ?? finish
      if ((next.value.choices[0]?.delta.content ?? '') !== '') tokens++
    }
    chatEnded = true
    return { finish, tokens }
  })()

  const { data, response } = await openai.embeddings.create({ model: embed, input: ['a first text', 'a second one'] }).withResponse()
  assert.equal(response.status, 200)
  assert.equal(data.data.length, 2)
  assert.equal(chatEnded, false, 'the embeddings came back while the chat was still streaming')
  const during = await listed(node)
  const chatListed = during.find((m) => m.modelID === chat)
  assert.equal(chatListed?.status, 'loaded')
  assert.equal(chatListed?.loaded?.busySlots, 1)
  assert.equal(chatListed?.loaded?.kind, 'chat')
  assert.equal(chatListed?.loaded?.loadedBy, 'request')

  const { finish } = await rest
  assert.equal(finish, 'length', 'the chat ran to its limit: not cut, not refused')
  const after = await listed(node)
  for (const id of [chat, embed]) {
    const model = after.find((m) => m.modelID === id)
    assert.equal(model?.status, 'loaded', id)
    assert.ok(model?.loaded != null && model.loaded.memoryBytes > 0 && model.loaded.contextLength > 0, id)
  }
  assert.equal(after.find((m) => m.modelID === embed)?.loaded?.kind, 'embedding')
  assert.equal(after.find((m) => m.modelID === embed)?.loaded?.slots, 0)
  assert.deepEqual(events, [{ event: 'model.loaded', data: { modelID: chat, contextLength: 2048, reason: 'request' } }, { event: 'model.loaded', data: { modelID: embed, contextLength: 512, reason: 'request' } }])

  // An embedding model is refused for chat, with a 400 that says so
  const refused = await node.api.post('/v1/chat/completions', { model: embed, messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 })
  assert.equal(refused.status, 400)
  assert.match(refused.body.error.message, /embedding model/)

  // The snapshot's single `model` is the one used most recently; /v1/models lists both as local
  const app = (await node.api.get('/v1/app')).body
  assert.ok([chat, embed].includes(app.model.modelID))
  assert.deepEqual((await openai.models.list()).data.filter((m) => m.owned_by === 'local').map((m) => m.id).sort(), [chat, embed].sort())
})

test('unload with a modelID unloads only that one; with no body, every model; neither is reloaded at the next start', async (t) => {
  const { node, chat, embed, events } = await nodeWithTwoModels(t)
  for (const id of [chat, embed]) assert.equal((await node.api.post('/v1/app/models/load', { modelID: id })).status, 200)
  assert.deepEqual(events.map((e) => [e.data.modelID, e.data.reason]), [[chat, 'explicit'], [embed, 'explicit']])
  assert.equal((await listed(node)).find((m) => m.modelID === chat)?.loaded?.loadedBy, 'explicit')

  const one = await node.api.post('/v1/app/models/unload', { modelID: embed.toUpperCase() })
  assert.deepEqual([one.status, one.body], [200, { status: 'unloaded', modelID: embed, unloaded: [embed] }])
  assert.deepEqual((await listed(node)).filter((m) => m.status === 'loaded').map((m) => m.modelID), [chat])
  const unknown = await node.api.post('/v1/app/models/unload', { modelID: 'no-such-model' })
  assert.equal(unknown.status, 404)
  const notLoaded = await node.api.post('/v1/app/models/unload', { modelID: embed })
  assert.deepEqual([notLoaded.status, notLoaded.body], [200, { status: 'unloaded', modelID: null, unloaded: [] }])
  const wrong = await node.api.post('/v1/app/models/unload', { modelID: 42 })
  assert.equal(wrong.status, 400)
  assert.deepEqual((await listed(node)).filter((m) => m.status === 'loaded').map((m) => m.modelID), [chat], 'a refused unload changes nothing')

  // Both loaded explicitly come back after a restart; after an unload with no body, none does
  assert.equal((await node.api.post('/v1/app/models/load', { modelID: embed })).status, 200)
  const restarted = await node.restart()
  await waitFor(async () => (await listed(restarted)).filter((m) => m.status === 'loaded').length === 2, { timeoutMs: 120_000, what: 'both models reloaded' })
  const all = await restarted.api.post('/v1/app/models/unload')
  assert.equal(all.status, 200)
  assert.deepEqual(all.body.unloaded.sort(), [chat, embed].sort())
  assert.equal((await listed(restarted)).filter((m) => m.status === 'loaded').length, 0)
  const again = await restarted.restart()
  assert.equal((await again.api.get('/v1/app')).body.model, null)
})

test('100 interleaved chat and embeddings requests on two models load each model once', async (t) => {
  const { node, chat, embed, events } = await nodeWithTwoModels(t)
  const openai = openaiFor(node)
  for (let round = 0; round < 25; round++) {
    const answers = await Promise.all([
      openai.chat.completions.create({ model: chat, messages: [{ role: 'user', content: `question ${round}` }], max_tokens: 2 }),
      openai.embeddings.create({ model: embed, input: `text ${round}` }),
      openai.chat.completions.create({ model: chat, messages: [{ role: 'user', content: `another ${round}` }], max_tokens: 2 }),
      openai.embeddings.create({ model: embed, input: [`more ${round}`, 'and more'] })
    ])
    assert.equal(answers.length, 4)
  }
  assert.deepEqual(events.filter((e) => e.event === 'model.loaded').map((e) => e.data.modelID).sort(), [chat, embed].sort(), 'two loads, then none')
  assert.equal(events.filter((e) => e.event === 'model.unloaded').length, 0)
})

test('a model too large for --memory-budget is refused before loading, naming both sizes; the loaded one keeps serving', async (t) => {
  const base = await startTestNode(t, { memoryBudgetBytes: 6 * 1024 ** 2 })
  const { node, chat } = await nodeWithTwoModels(t, base)
  assert.equal((await node.api.post('/v1/app/models/load', { modelID: chat })).status, 200)
  const large = join(import.meta.dirname, '../../../shared/models/random-llama-24M-q8_0.gguf')
  const imported = await node.api.post('/v1/app/models/import', { path: large, modelID: 'large-model' })
  assert.equal(imported.status, 200, JSON.stringify(imported.body))
  const refused = await node.api.post('/v1/app/models/load', { modelID: 'large-model' })
  assert.equal(refused.status, 409)
  assert.match(refused.body.error.message, /needs about [\d.]+ MiB .*more than the 6\.0 MiB the memory budget/)
  assert.deepEqual((await listed(node)).filter((m) => m.status === 'loaded').map((m) => m.modelID), [chat])
  const answer = await openaiFor(node).chat.completions.create({ model: chat, messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 })
  assert.equal(answer.usage?.completion_tokens, 2)
})

test('over the network: a node with two models loaded serves both to a peer', async (t) => {
  const relay = await startTestRelay(t)
  const server = await startTestNode(t, { network: FAST_NETWORK, p2pListen: [] })
  const { chat, embed } = await nodeWithTwoModels(t, server)
  for (const id of [chat, embed]) assert.equal((await server.api.post('/v1/app/models/load', { modelID: id })).status, 200)
  const asker = await startTestNode(t, { network: FAST_NETWORK, p2pListen: [] })
  for (const node of [server, asker]) assert.equal((await node.api.patch('/v1/app/settings', wanSettings(relay))).status, 200)
  await waitForPeers(asker, [server.nodeID], { timeoutMs: 120_000 })
  await waitFor(() => asker.node.network.peer(server.nodeID)?.record.models.allLoaded?.length === 2, { timeoutMs: 60_000, what: 'the server\'s record to list both models' })
  const openai = openaiFor(asker)
  const { data: answer, response } = await openai.chat.completions.create({ model: chat, messages: [{ role: 'user', content: 'hi' }], max_tokens: 3 }).withResponse()
  assert.equal(response.headers.get('x-served-by'), `peer:${server.nodeID}`)
  assert.equal(answer.usage?.completion_tokens, 3)
  const embedded = await openai.embeddings.create({ model: embed, input: 'a text' }).withResponse()
  assert.equal(embedded.response.headers.get('x-served-by'), `peer:${server.nodeID}`)
  assert.equal(embedded.data.data.length, 1)
  assert.deepEqual((await openai.models.list()).data.filter((m) => m.owned_by === `peer:${server.nodeID}`).map((m) => m.id).sort(), [chat, embed].sort())
})
