// Tools, embeddings and text completions served by a peer, through the relay, in the three-node
// test, through the official openai client against a node that does not have the model. Every answer is compared
// with the same request answered locally by the serving peer: the peer path changes nothing in it.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { join } from 'node:path'
import OpenAI from 'openai'
import { INFER_PROTOCOL_CHAT, InferFrame } from '../../src/remote/infer.ts'
import { MAX_INFER_REQUEST_BYTES, MAX_INFER_RESPONSE_FRAME_BYTES } from '../../src/remote/infer-wire.ts'
import { askPeer } from '../../src/wire/index.ts'
import { tempDir, type TestNode } from '../support/node.ts'
import { startTestRelay, waitForPeers } from '../support/network.ts'
import { metric, settled, startPeer } from '../support/peers.ts'
import { writeTinyGguf } from '../support/tiny-gguf.ts'
import { CLOCK, WEATHER, assertValidArguments } from '../support/tools.ts'

const CHAT_MODEL = 'tiny-chat'
const FIM_MODEL = 'tiny-fim'
const ask = [{ role: 'user' as const, content: 'What is the weather in Paris?' }]

function openaiFor (node: TestNode): OpenAI {
  return new OpenAI({ baseURL: `${node.node.url}/v1`, apiKey: 'sk-local-dummy', maxRetries: 0, timeout: 300_000 })
}

async function balanceMicro (node: TestNode): Promise<number> {
  return Math.round(((await node.api.get('/v1/app/wallet')).body as { currentBalance: number }).currentBalance * 1e6)
}

test('three nodes and a relay: tool calls, embeddings and completions served by a peer, billed on real tokens', async (t) => {
  const relay = await startTestRelay(t)
  const dir = await tempDir(t, 'meshnode-model-')
  // The tool definitions take a few hundred tokens in the template: the chat model gets a context that holds them.
  const chat = await writeTinyGguf(join(dir, 'tiny.gguf'), { seed: 7, contextLength: 4096 })
  const fim = await writeTinyGguf(join(dir, 'fim.gguf'), { seed: 7, infill: true })
  // No direct listen addresses: the only way between the nodes is through the relay. A high electricity cost makes
  // the tiny models' prices large enough that an off-by-one would show.
  const priced = { electricity_cost: 5000 }
  const a = await startPeer(t, relay, { settings: priced, config: { p2pListen: [] } })
  const b = await startPeer(t, relay, { model: { id: CHAT_MODEL, path: chat.path }, settings: priced, config: { p2pListen: [], contextSize: 4096 } })
  const c = await startPeer(t, relay, { model: { id: FIM_MODEL, path: fim.path }, settings: priced, config: { p2pListen: [] } })
  // Relayed circuits only, on a loaded machine: the mesh may take a while to form (a deadline, not an assertion).
  const meshed = { timeoutMs: 120_000 }
  await Promise.all([waitForPeers(a, [b.nodeID, c.nodeID], meshed), waitForPeers(b, [a.nodeID, c.nodeID], meshed), waitForPeers(c, [a.nodeID, b.nodeID], meshed)])
  const openai = openaiFor(a)
  const atB = openaiFor(b)
  assert.equal(a.node.engine.loaded(), null, 'A has no model')
  for (const node of [a, b, c]) {
    assert.ok(node.node.network.host.getConnections().every(conn => conn.remoteAddr.toString().includes('/p2p-circuit') || conn.remoteAddr.toString().includes(relay.relay.peerId.toString())), 'every connection is relayed')
  }

  await t.test('a named tool_choice: the call is served by the peer, as the peer answers it locally', async () => {
    const request = { model: CHAT_MODEL, messages: ask, tools: [CLOCK, WEATHER], temperature: 0, tool_choice: { type: 'function' as const, function: { name: 'get_weather' } } }
    const { data: completion, response } = await openai.chat.completions.create(request).withResponse()
    assert.equal(response.headers.get('x-served-by'), `peer:${b.nodeID}`)
    const choice = completion.choices[0]
    assert.equal(choice.finish_reason, 'tool_calls')
    assert.equal(choice.message.content, null)
    const call = choice.message.tool_calls?.[0]
    assert.ok(call?.type === 'function')
    assert.match(call.id, /^call_/)
    assert.equal(call.function.name, 'get_weather')
    assertValidArguments('get_weather', call.function.arguments)
    const local = await atB.chat.completions.create(request)
    const localCall = local.choices[0].message.tool_calls?.[0]
    assert.ok(localCall?.type === 'function')
    assert.equal(call.function.arguments, localCall.function.arguments, 'greedy: the same arguments as locally')
    assert.equal(completion.usage?.completion_tokens, local.usage?.completion_tokens)
    assert.equal(completion.usage?.prompt_tokens, local.usage?.prompt_tokens)

    // Streamed through the peer, reassembled by the SDK's own helper; the deltas have OpenAI's shape, as locally.
    const stream = openai.chat.completions.stream(request)
    const deltas: OpenAI.Chat.Completions.ChatCompletionChunk[] = []
    stream.on('chunk', (chunk) => { deltas.push(chunk) })
    const final = await stream.finalChatCompletion()
    const streamed = final.choices[0].message.tool_calls?.[0]
    assert.ok(streamed?.type === 'function')
    assert.equal(final.choices[0].finish_reason, 'tool_calls')
    assert.equal(streamed.function.name, 'get_weather')
    assert.equal(streamed.function.arguments, call.function.arguments)
    const toolDeltas = deltas.flatMap((chunk) => chunk.choices[0]?.delta.tool_calls ?? [])
    assert.ok(toolDeltas.length >= 2, 'the call opens, then its arguments follow')
    assert.deepEqual(toolDeltas[0], { index: 0, id: streamed.id, type: 'function', function: { name: 'get_weather', arguments: '' } })
    for (const later of toolDeltas.slice(1)) {
      assert.deepEqual(Object.keys(later).sort(), ['function', 'index'])
      assert.equal(later.index, 0)
      assert.deepEqual(Object.keys(later.function ?? {}), ['arguments'])
    }
    assert.equal(toolDeltas.map(d => d.function?.arguments ?? '').join(''), call.function.arguments)
  })

  await t.test('required and a tool-call round trip, served by the peer', async () => {
    const required = await openai.chat.completions.create({ model: CHAT_MODEL, messages: ask, tools: [WEATHER, CLOCK], tool_choice: 'required', temperature: 1, seed: 2 })
    assert.equal(required.choices[0].finish_reason, 'tool_calls')
    const call = required.choices[0].message.tool_calls?.[0]
    assert.ok(call?.type === 'function' && ['get_weather', 'get_time'].includes(call.function.name))
    assertValidArguments(call.function.name, call.function.arguments)

    const first = await openai.chat.completions.create({ model: CHAT_MODEL, messages: ask, tools: [WEATHER], temperature: 0, tool_choice: { type: 'function', function: { name: 'get_weather' } } })
    const message = first.choices[0].message
    const firstCall = message.tool_calls?.[0]
    assert.ok(firstCall?.type === 'function')
    const followUp = { model: CHAT_MODEL, tools: [WEATHER], max_tokens: 6, temperature: 0, logit_bias: { 5: -100 }, messages: [...ask, message, { role: 'tool' as const, tool_call_id: firstCall.id, content: '{"sky":"clear"}' }] }
    const { data: answer, response } = await openai.chat.completions.create(followUp).withResponse()
    assert.equal(response.headers.get('x-served-by'), `peer:${b.nodeID}`)
    assert.equal(answer.choices[0].finish_reason, 'length')
    assert.equal(answer.choices[0].message.content, (await atB.chat.completions.create(followUp)).choices[0].message.content, 'history, tool result and logit_bias reach the peer')
    // A tool_choice naming a tool not given is the peer's 400, naming the parameter, as locally.
    await assert.rejects(openai.chat.completions.create({ model: CHAT_MODEL, messages: ask, tools: [WEATHER], tool_choice: { type: 'function', function: { name: 'nope' } } }), (err: unknown) => {
      assert.ok(err instanceof OpenAI.BadRequestError)
      assert.equal(err.param, 'tool_choice')
      return true
    })
  })

  await t.test('embeddings served by the peer: the vectors it computes locally, float and base64', async () => {
    const input = ['the cat sat', 'on the mat', 'the cat sat']
    const { data: remote, response } = await openai.embeddings.create({ model: CHAT_MODEL, input, encoding_format: 'float' }).withResponse()
    assert.equal(response.headers.get('x-served-by'), `peer:${b.nodeID}`)
    const local = await atB.embeddings.create({ model: CHAT_MODEL, input, encoding_format: 'float' })
    assert.deepEqual(remote.data, local.data)
    assert.equal(remote.data.length, 3)
    assert.equal(remote.data[0].embedding.length, b.node.engine.loaded()?.embeddingLength)
    assert.deepEqual(remote.data[0].embedding, remote.data[2].embedding, 'same input, same vector')
    assert.deepEqual(remote.usage, local.usage)
    assert.ok(remote.usage.prompt_tokens > 0)
    const base64 = await openai.embeddings.create({ model: CHAT_MODEL, input: input[1] })
    assert.deepEqual(base64.data[0].embedding, local.data[1].embedding.map(v => Math.fround(v)))
  })

  await t.test('text completions served by peers: streamed equals non-streamed equals local; suffix on a peer with infill tokens', async () => {
    const request = { model: CHAT_MODEL, prompt: 'Once upon a time', max_tokens: 8, temperature: 0 }
    const { data: remote, response } = await openai.completions.create(request).withResponse()
    assert.equal(response.headers.get('x-served-by'), `peer:${b.nodeID}`)
    assert.equal(remote.object, 'text_completion')
    assert.equal(remote.usage?.completion_tokens, 8)
    assert.equal(remote.choices[0].text, (await atB.completions.create(request)).choices[0].text)
    let streamed = ''
    for await (const chunk of await openai.completions.create({ ...request, stream: true })) streamed += chunk.choices[0]?.text ?? ''
    assert.equal(streamed, remote.choices[0].text)

    const fill = { model: FIM_MODEL, prompt: 'def hello():', suffix: '    return world', max_tokens: 6, temperature: 0 }
    const { data: filled, response: fillResponse } = await openai.completions.create(fill).withResponse()
    assert.equal(fillResponse.headers.get('x-served-by'), `peer:${c.nodeID}`)
    assert.equal(filled.choices[0].text, (await openaiFor(c).completions.create(fill)).choices[0].text)
    await assert.rejects(openai.completions.create({ ...fill, model: CHAT_MODEL }), (err: unknown) => {
      assert.ok(err instanceof OpenAI.BadRequestError)
      assert.equal(err.param, 'suffix')
      return true
    })
  })

  await t.test('credits: a tool call is billed on its generated tokens, embeddings on their input tokens', async () => {
    await settled([a, b, c])
    const price = (await a.api.get('/v1/app/peers')).body.peers.find((p: { nodeID: string }) => p.nodeID === b.nodeID).pricePer1kTokens as number
    const priceMicro = Math.round(price * 1e6)
    assert.ok(priceMicro > 1000, `a price that shows rounding: ${priceMicro}`)
    const [aBefore, bBefore, tokensBefore] = [await balanceMicro(a), await balanceMicro(b), await metric(b.api, 'meshnode_peer_tokens_generated_total')]
    const call = await openai.chat.completions.create({ model: CHAT_MODEL, messages: ask, tools: [WEATHER], temperature: 0, tool_choice: { type: 'function', function: { name: 'get_weather' } } })
    const embedded = await openai.embeddings.create({ model: CHAT_MODEL, input: ['one input', 'and another'] })
    const generated = call.usage?.completion_tokens ?? 0
    const read = embedded.usage.prompt_tokens
    assert.ok(generated > 0 && read > 0)
    await settled([a, b])
    const cost = Math.ceil(priceMicro * generated / 1000) + Math.ceil(priceMicro * read / 1000)
    assert.equal(await balanceMicro(a), aBefore - cost)
    assert.equal(await balanceMicro(b), bBefore + cost)
    assert.equal(await metric(b.api, 'meshnode_peer_tokens_generated_total'), tokensBefore + generated + read)
  })

  await t.test('an older peer: a 1.0.0 chat request (no kind, no tools) is still served', async () => {
    const old = { modelID: CHAT_MODEL, request: { messages: [{ role: 'user', content: 'hi' }], maxTokens: 3, temperature: 0 }, ptnID: null }
    const frames: InferFrame[] = []
    for await (const frame of askPeer(a.node.network, b.nodeID, INFER_PROTOCOL_CHAT, old, InferFrame, (f) => f.type === 'done' || f.type === 'error', {
      timeoutMs: 60_000, maxRequestBytes: MAX_INFER_REQUEST_BYTES, maxAnswerBytes: MAX_INFER_RESPONSE_FRAME_BYTES
    })) frames.push(frame)
    const done = frames.at(-1)
    assert.ok(done?.type === 'done', JSON.stringify(done))
    assert.equal(done.usage.completionTokens, 3)
    const text = frames.map(f => f.type === 'delta' ? f.text : '').join('')
    const local = await atB.chat.completions.create({ model: CHAT_MODEL, messages: [{ role: 'user', content: 'hi' }], max_tokens: 3, temperature: 0 })
    assert.equal(text, local.choices[0].message.content)
  })
})
