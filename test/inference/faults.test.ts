// No chat request, and nothing a peer asks for, may end the node. The request that used
// to kill it (a grammar with a temperature around 1e-40), sent locally and through a peer; and a failure injected at
// llama.cpp's sampling boundary while two generations share a batch, which must end only the one it hit.
import { test, type TestContext } from 'node:test'
import assert from 'node:assert/strict'
import { join } from 'node:path'
import type { LlamaContext } from 'node-llama-cpp'
import type { RunningNode } from '../../src/node.ts'
import { startChatNode, TINY_MODEL_ID, collectSse } from '../support/chat-node.ts'
import { startTestNode, tempDir, waitFor, type TestNode } from '../support/node.ts'
import { FAST_NETWORK, startTestRelay, waitForPeers, wanSettings } from '../support/network.ts'
import { failSamplingOnce } from '../support/sampling-fault.ts'
import { writeTinyGguf } from '../support/tiny-gguf.ts'

const CRASH_FORMATS = [
  { type: 'json_object' },
  { type: 'json_schema', json_schema: { name: 'answer', schema: { type: 'object', properties: { a: { type: 'string' } }, required: ['a'] } } }
] as const

function crashRequest (model: string, format: typeof CRASH_FORMATS[number], stream = false): Record<string, unknown> {
  return { model, messages: [{ role: 'user', content: 'Answer in JSON.' }], response_format: format, temperature: 1e-40, max_tokens: 24, stream }
}

/** The node still answers a plain chat in full: it is alive and its slots came back. */
async function assertStillServes (node: TestNode, model: string): Promise<void> {
  const res = await node.api.post('/v1/chat/completions', { model, messages: [{ role: 'user', content: 'Hello' }], max_tokens: 8, temperature: 0 })
  assert.equal(res.status, 200, JSON.stringify(res.body))
  assert.equal(res.body.choices[0].message.role, 'assistant')
}

test('the request that killed the node (a grammar at temperature 1e-40) is answered, and the node keeps serving', async (t) => {
  const node = await startChatNode(t)
  for (const format of CRASH_FORMATS) {
    const res = await node.api.post('/v1/chat/completions', crashRequest(TINY_MODEL_ID, format))
    // A temperature this small samples greedily; the grammar holds, so the answer starts as JSON.
    assert.equal(res.status, 200, JSON.stringify(res.body))
    assert.match(res.body.choices[0].message.content, /^\s*\{/)
    const streamed = await fetch(`${node.node.url}/v1/chat/completions`, {
      method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(crashRequest(TINY_MODEL_ID, format, true))
    })
    assert.equal(streamed.status, 200)
    const { data } = await collectSse(streamed)
    assert.equal(data.at(-1), '[DONE]')
  }
  await assertStillServes(node, TINY_MODEL_ID)
  assert.deepEqual(node.node.engine.stats(), { slots: 2, busySlots: 0, queued: 0 })
})

/** Makes the loaded model's sampler fail once, on the `nth` token sampled from now on (test/support/sampling-fault.ts). */
async function injectSamplingFault (t: TestContext, node: RunningNode, nth: number): Promise<{ fired: () => boolean }> {
  // The generation context is made by the model's first chat: one short chat makes it
  for await (const event of node.engine.generate({ messages: [{ role: 'user', content: 'hi' }], maxTokens: 1 })) assert.notEqual(event, null)
  const loaded = (node.engine as unknown as { models: Map<string, { context: LlamaContext | null }> }).models.values().next().value
  assert.ok(loaded?.context != null, 'a model is loaded, with its generation context')
  return failSamplingOnce(t, loaded.context, nth)
}

test('a failure inside the engine mid-generation ends only that request; the other one in the same batch finishes', async (t) => {
  const node = await startChatNode(t)
  const fault = await injectSamplingFault(t, node.node, 6)
  const body = (i: number): Record<string, unknown> => ({ model: TINY_MODEL_ID, messages: [{ role: 'user', content: `Story ${i}` }], max_tokens: 20, temperature: 0 })
  const answers = await Promise.all([1, 2].map(async (i) => await node.api.post('/v1/chat/completions', body(i))))
  assert.ok(fault.fired())
  const statuses = answers.map(a => a.status).sort()
  assert.deepEqual(statuses, [200, 500], JSON.stringify(answers.map(a => a.body)))
  const failed = answers.find(a => a.status === 500)
  assert.equal(failed?.body.error.type, 'internal_error')
  assert.match(failed?.body.error.message, /request [0-9a-f-]{36}/)
  await assertStillServes(node, TINY_MODEL_ID)
  assert.deepEqual(node.node.engine.stats(), { slots: 2, busySlots: 0, queued: 0 })
})

test('a streamed generation hit by an engine failure ends with an error event and [DONE]', async (t) => {
  const node = await startChatNode(t)
  await injectSamplingFault(t, node.node, 4)
  const res = await fetch(`${node.node.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: TINY_MODEL_ID, messages: [{ role: 'user', content: 'Story' }], max_tokens: 20, temperature: 0, stream: true })
  })
  assert.equal(res.status, 200)
  const { data } = await collectSse(res)
  assert.equal(data.at(-1), '[DONE]')
  const error = JSON.parse(data.at(-2) ?? '{}')
  assert.equal(error.error?.type, 'internal_error')
  await assertStillServes(node, TINY_MODEL_ID)
})

test('the crash request and an engine failure sent through a peer: the serving peer answers an error frame and lives', async (t) => {
  const relay = await startTestRelay(t)
  const { path } = await writeTinyGguf(join(await tempDir(t, 'meshnode-model-'), 'tiny.gguf'), { seed: 7 })
  const server = await startTestNode(t, { network: FAST_NETWORK })
  await server.node.engine.load(TINY_MODEL_ID, path)
  const client = await startTestNode(t, { network: FAST_NETWORK })
  for (const node of [server, client]) assert.equal((await node.api.patch('/v1/app/settings', wanSettings(relay))).status, 200)
  await Promise.all([waitForPeers(client, [server.nodeID]), waitForPeers(server, [client.nodeID])])
  await waitFor(() => client.node.network.peer(server.nodeID)?.record.models.loaded === TINY_MODEL_ID, { what: 'the server to advertise its model' })

  for (const format of CRASH_FORMATS) {
    const res = await client.api.post('/v1/chat/completions', crashRequest(TINY_MODEL_ID, format))
    assert.equal(res.status, 200, JSON.stringify(res.body))
    assert.equal(res.headers.get('x-served-by'), `peer:${server.nodeID}`)
  }

  await injectSamplingFault(t, server.node, 3)
  const failed = await client.api.post('/v1/chat/completions', { model: TINY_MODEL_ID, messages: [{ role: 'user', content: 'Hi' }], max_tokens: 20, temperature: 0 })
  assert.ok(failed.status >= 500, JSON.stringify(failed.body))
  assert.ok(typeof failed.body.error?.message === 'string')
  await assertStillServes(server, TINY_MODEL_ID)
  await assertStillServes(client, TINY_MODEL_ID)
})
