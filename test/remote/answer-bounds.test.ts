// A peer may not send more answer than the request allows, nor take forever sending it. The peers here are stand-ins
// that advertise a model and answer the infer protocol (real frames, written by the project's own frame writer) with
// a flood of text deltas, or with keep-alives and slow deltas that never end. The requesting node cuts the answer at
// its bound: the client gets an error envelope, the flooding peer is banned (a slow one is not), nothing is paid,
// and the node serves on.
import assert from 'node:assert/strict'
import { test, type TestContext } from 'node:test'
import { pino } from 'pino'
import type { Stream } from '@libp2p/interface'
import { NotFoundError } from '../../src/errors.ts'
import type { InferenceEvent } from '../../src/inference/index.ts'
import {
  INFER_ANSWER_FRAME_CHARS, INFER_PROTOCOL, INFER_PROTOCOL_CHAT, INFER_PROTOCOL_REASONING, InferRequest, type InferFrame, MAX_INFER_ANSWER_CHARS, MAX_INFER_ANSWER_CHARS_PER_TOKEN,
  MAX_INFER_REQUEST_BYTES, UNSEEN_ANSWER_TOKENS, UNSEEN_INPUT_TOKENS, inferAnswerLimit, requestInference
} from '../../src/remote/infer.ts'
import { PeerRouter, type PeerRouterDeps } from '../../src/remote/router.ts'
import { ProtocolError, readRequest, writeMessage, type FrameStream } from '../../src/wire/index.ts'
import { collectSse } from '../support/chat-node.ts'
import { startTestRelay, startWanNode } from '../support/network.ts'
import { waitFor, type TestNode } from '../support/node.ts'
import { directAddrs, serveRecord, standInHost, standInRecord } from '../support/stand-in.ts'

/** What a flooding stand-in is willing to send before it gives up by itself: far beyond every bound. */
const FLOOD_LIMIT_BYTES = 64 * 1024 * 1024
/** 6000 credits per 1k tokens: a request for 10 tokens holds 60 of a node's 100 credits, so a hold kept by mistake refuses the next one (402). */
const DEAR_PRICE_MICRO = 6_000_000_000
const GRANT_CREDITS = 100

type Answer = (frames: FrameStream, stream: Stream, state: InferStandIn) => Promise<void>

interface InferStandIn {
  nodeID: string
  model: string
  /** Bytes of answer frames it wrote. */
  sentBytes: number
  /** How its last answer ended: `cut` when the asking side reset the stream, `gave_up` when it reached FLOOD_LIMIT_BYTES. */
  outcome: 'cut' | 'gave_up' | 'finished' | null
}

/** A stand-in serving `model` on every infer protocol version, answering each request with `answer`, known to `node`. */
async function inferStandIn (t: TestContext, node: TestNode, model: string, answer: Answer, options: { priceMicro?: number } = {}): Promise<InferStandIn> {
  const peer = await standInHost(t)
  const state: InferStandIn = { nodeID: peer.identity.nodeID, model, sentBytes: 0, outcome: null }
  await serveRecord(peer, () => standInRecord(peer.identity, {
    models: { loaded: model, downloaded: [model] },
    capacity: { slots: 4, busySlots: 0, queued: 0, reservedSlots: 0 },
    pricePer1kTokensMicro: options.priceMicro ?? 0
  }))
  const handler = async (stream: Stream): Promise<void> => {
    state.outcome = null
    try {
      const { frames } = await readRequest(stream, InferRequest, { maxRequestBytes: MAX_INFER_REQUEST_BYTES, timeoutMs: 5_000 })
      await answer(frames, stream, state)
      state.outcome ??= 'finished'
    } catch {
      state.outcome ??= 'cut'
    }
  }
  for (const protocol of [INFER_PROTOCOL_CHAT, INFER_PROTOCOL, INFER_PROTOCOL_REASONING]) {
    await peer.host.handle(protocol, handler, { runOnLimitedConnection: true })
  }
  await peer.host.dial(directAddrs(node))
  await waitFor(() => node.node.network.peer(state.nodeID)?.record.models.loaded === model, { what: `the stand-in serving ${model} in the peer table` })
  return state
}

/** Writes one answer frame with the project's frame writer, counting its bytes. */
async function send (frames: FrameStream, state: InferStandIn, frame: InferFrame): Promise<void> {
  await writeMessage(frames, frame)
  state.sentBytes += Buffer.byteLength(JSON.stringify(frame))
}

/** Text deltas of `chars` characters, a keep-alive after each, until the stream is cut or FLOOD_LIMIT_BYTES went out. */
function flood (chars: number): Answer {
  const text = 'x'.repeat(chars)
  return async (frames, stream, state) => {
    while (state.sentBytes < FLOOD_LIMIT_BYTES) {
      await send(frames, state, { type: 'delta', text })
      await send(frames, state, { type: 'keepalive' })
    }
    state.outcome = 'gave_up'
    stream.abort(new Error('the stand-in gave up flooding'))
  }
}

/** `frame` every `everyMs` until the stream is cut (or a minute passed: a bound the test never reaches). */
function forever (frame: InferFrame, everyMs: number): Answer {
  return async (frames, stream, state) => {
    for (let i = 0; i < 60_000 / everyMs; i++) {
      await send(frames, state, frame)
      await new Promise((resolve) => setTimeout(resolve, everyMs))
    }
    stream.abort(new Error('the stand-in stopped after a minute'))
  }
}

function micro (credits: number): number {
  return Math.round(credits * 1e6)
}

async function wallet (node: TestNode): Promise<{ currentBalance: number, totalSpent: number }> {
  return (await node.api.get('/v1/app/wallet')).body as { currentBalance: number, totalSpent: number }
}

test('the bound of answer the request allows: max_tokens × a per-token bound; counted with each frame\'s share, kept below the overall cap', () => {
  const chat = (extra: Record<string, unknown>) => ({ kind: 'chat' as const, messages: [{ role: 'user' as const, content: 'hi' }], ...extra })
  assert.deepEqual(inferAnswerLimit(chat({ maxTokens: 10 })), { chars: 10 * MAX_INFER_ANSWER_CHARS_PER_TOKEN, tokens: 10 })
  assert.deepEqual(inferAnswerLimit(chat({ maxTokens: 10, thoughtTokens: 6 })), { chars: 16 * MAX_INFER_ANSWER_CHARS_PER_TOKEN, tokens: 16 }, 'a thought budget counts too')
  assert.deepEqual(inferAnswerLimit(chat({})), { chars: MAX_INFER_ANSWER_CHARS, tokens: null })
  assert.deepEqual(inferAnswerLimit(chat({ maxTokens: 1e12 })), { chars: MAX_INFER_ANSWER_CHARS, tokens: 1e12 })
  assert.deepEqual(inferAnswerLimit({ kind: 'completion', prompt: 'a', maxTokens: 16 }), { chars: 16 * MAX_INFER_ANSWER_CHARS_PER_TOKEN, tokens: 16 })
  assert.ok(INFER_ANSWER_FRAME_CHARS < MAX_INFER_ANSWER_CHARS_PER_TOKEN / 4, 'a token of its own frame, even one of a few frames, fits its share')
})

test('a peer flooding an answer past what max_tokens allows: cut at the bound, a 503 envelope, the peer banned, nothing paid, the node serves on', async (t) => {
  const relay = await startTestRelay(t)
  const node = await startWanNode(t, relay)
  await waitFor(() => node.node.network.relayConnected, { what: 'WAN on' })
  const bound = 10 * MAX_INFER_ANSWER_CHARS_PER_TOKEN
  const allows = new RegExp(`more than ${bound} characters, what a request for 10 tokens allows`)

  // Not streamed: the answer would be collected whole. The first delta passes, the second crosses the bound.
  const plain = await inferStandIn(t, node, 'flood-plain', flood(8 * 1024), { priceMicro: DEAR_PRICE_MICRO })
  const res = await node.api.post('/v1/chat/completions', { model: plain.model, messages: [{ role: 'user', content: 'Talk.' }], max_tokens: 10 })
  assert.equal(res.status, 503, JSON.stringify(res.body))
  assert.equal(res.body.error.type, 'service_unavailable')
  assert.match(res.body.error.message, /failed while answering/)
  assert.match(res.body.error.message, allows)
  await waitFor(() => plain.outcome != null, { what: 'the flooding stand-in to see its stream end' })
  assert.equal(plain.outcome, 'cut', `the node reset the stream long before the stand-in gave up (${plain.sentBytes} bytes sent)`)
  assert.ok(plain.sentBytes < FLOOD_LIMIT_BYTES / 4, `sent ${plain.sentBytes} bytes`)
  await waitFor(() => node.node.network.isBanned(plain.nodeID), { what: 'the flooding peer to be banned' })
  assert.equal(node.node.network.peer(plain.nodeID), null, 'and dropped from the peer table')

  // Streamed: the client gets what came within the bound, then the error in the stream's own terms.
  const streamed = await inferStandIn(t, node, 'flood-streamed', flood(8 * 1024), { priceMicro: DEAR_PRICE_MICRO })
  const response = await fetch(`${node.node.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: streamed.model, messages: [{ role: 'user', content: 'Talk.' }], max_tokens: 10, stream: true })
  })
  assert.equal(response.status, 200, 'the 402 a held-back hold would cause: the first request released its hold')
  const { data } = await collectSse(response)
  const content = data.slice(0, -2).map((line) => (JSON.parse(line) as { choices: Array<{ delta: { content?: string } }> }).choices[0]?.delta.content ?? '').join('')
  assert.ok(content.length <= bound, `what reached the client is within the bound: ${content.length} characters`)
  const error = JSON.parse(data.at(-2) ?? '{}') as { error?: { type: string, message: string } }
  assert.equal(error.error?.type, 'service_unavailable')
  assert.match(error.error?.message ?? '', allows)
  assert.equal(data.at(-1), '[DONE]')
  await waitFor(() => streamed.outcome != null, { what: 'the flooding stand-in to see its stream end' })
  assert.equal(streamed.outcome, 'cut')
  await waitFor(() => node.node.network.isBanned(streamed.nodeID), { what: 'the second flooding peer to be banned' })

  // A cut answer has no `done`, so no usage to pay for: the hold is released, nothing is paid.
  const spent = await wallet(node)
  assert.equal(spent.currentBalance, GRANT_CREDITS)
  assert.equal(spent.totalSpent, 0)

  // The node serves on, and pays a peer that answers within the bound as before: price × the tokens it reported.
  const fair = await inferStandIn(t, node, 'fair', async (frames, _stream, state) => {
    await send(frames, state, { type: 'keepalive' })
    await send(frames, state, { type: 'delta', text: 'Hello there.' })
    await send(frames, state, { type: 'done', finishReason: 'stop', usage: { promptTokens: 5, completionTokens: 3, totalTokens: 8, cachedTokens: 0 } })
    await frames.stream.close()
  }, { priceMicro: DEAR_PRICE_MICRO })
  const ok = await node.api.post('/v1/chat/completions', { model: fair.model, messages: [{ role: 'user', content: 'Hi.' }], max_tokens: 10 })
  assert.equal(ok.status, 200, JSON.stringify(ok.body))
  assert.equal(ok.body.choices[0].message.content, 'Hello there.')
  assert.equal((await wallet(node)).currentBalance, GRANT_CREDITS - DEAR_PRICE_MICRO * 3 / 1000 / 1e6)
  assert.equal((await node.api.get('/health')).status, 200)
  assert.equal(node.node.network.isBanned(fair.nodeID), false)
})

test('a peer reporting more tokens than its answer can hold is paid for what it can hold, and the client is told that count', async (t) => {
  const relay = await startTestRelay(t)
  const node = await startWanNode(t, relay)
  await waitFor(() => node.node.network.relayConnected, { what: 'WAN on' })
  // 50 credits per 1k tokens: a request without max_tokens holds 51.2 of the node's 100, and a claim of a billion
  // tokens, were it paid, would take the whole balance.
  const priceMicro = 50_000_000
  const claimed = 1_000_000_000
  const cost = (tokens: number): number => Math.ceil(priceMicro * tokens / 1000)

  // A chat without max_tokens: 12 bytes of text, so at most 12 + UNSEEN_ANSWER_TOKENS tokens.
  const chat = await inferStandIn(t, node, 'overclaim-chat', async (frames, _stream, state) => {
    await send(frames, state, { type: 'delta', text: 'Hello there.' })
    await send(frames, state, { type: 'done', finishReason: 'stop', usage: { promptTokens: 5, completionTokens: claimed, totalTokens: claimed + 5, cachedTokens: 0 } })
    await frames.stream.close()
  }, { priceMicro })
  const answered = await node.api.post('/v1/chat/completions', { model: chat.model, messages: [{ role: 'user', content: 'Hi.' }] })
  assert.equal(answered.status, 200, JSON.stringify(answered.body))
  const chatTokens = 12 + UNSEEN_ANSWER_TOKENS
  assert.deepEqual(answered.body.usage, { prompt_tokens: 5, completion_tokens: chatTokens, total_tokens: 5 + chatTokens, prompt_tokens_details: { cached_tokens: 0 } })
  assert.equal(micro((await wallet(node)).totalSpent), cost(chatTokens))

  // Embeddings: the inputs' bytes plus UNSEEN_INPUT_TOKENS each is what they can be read as.
  const input = ['ab', 'héllo']
  const embed = await inferStandIn(t, node, 'overclaim-embed', async (frames, _stream, state) => {
    for (const index of [0, 1]) await send(frames, state, { type: 'embedding', index, vector: [0.6, 0.8] })
    await send(frames, state, { type: 'done', finishReason: 'stop', usage: { promptTokens: claimed, completionTokens: 0, totalTokens: claimed, cachedTokens: 0 } })
    await frames.stream.close()
  }, { priceMicro })
  const vectors = await node.api.post('/v1/embeddings', { model: embed.model, input })
  assert.equal(vectors.status, 200, JSON.stringify(vectors.body))
  const embedTokens = 2 + 6 + 2 * UNSEEN_INPUT_TOKENS
  assert.equal(vectors.body.usage.prompt_tokens, embedTokens)
  assert.equal(micro((await wallet(node)).totalSpent), cost(chatTokens) + cost(embedTokens))
  assert.equal(node.node.network.isBanned(chat.nodeID), false, 'a count is not proof of malice: the peer is paid less, not banned')
})

test('a request without max_tokens: a flood is cut at the overall cap', async (t) => {
  const relay = await startTestRelay(t)
  const node = await startWanNode(t, relay)
  await waitFor(() => node.node.network.relayConnected, { what: 'WAN on' })
  const peer = await inferStandIn(t, node, 'flood-uncapped', flood(256 * 1024))
  const res = await node.api.post('/v1/chat/completions', { model: peer.model, messages: [{ role: 'user', content: 'Talk.' }] })
  assert.equal(res.status, 503, JSON.stringify(res.body).slice(0, 2000))
  assert.match(res.body.error.message, new RegExp(`more than ${MAX_INFER_ANSWER_CHARS} characters, the most any answer may hold`))
  await waitFor(() => peer.outcome != null, { what: 'the flooding stand-in to see its stream end' })
  assert.equal(peer.outcome, 'cut', `the node reset the stream before the stand-in gave up (${peer.sentBytes} bytes sent)`)
  await waitFor(() => node.node.network.isBanned(peer.nodeID), { what: 'the flooding peer to be banned' })
  assert.equal((await node.api.get('/health')).status, 200)
})

test('an answer that never ends (keep-alives, or a trickle of deltas) meets the answer deadline; a slow peer is not banned', async (t) => {
  const relay = await startTestRelay(t)
  const node = await startWanNode(t, relay)
  await waitFor(() => node.node.network.relayConnected, { what: 'WAN on' })
  const deadlineMs = 1_500
  const late = new RegExp(`No complete answer within ${deadlineMs} ms of asking`)
  const ask = (model: string) => ({ modelID: model, ptnID: null, request: { kind: 'chat' as const, messages: [{ role: 'user' as const, content: 'Talk.' }] } })

  // Keep-alives restart the idle deadline (30 s), never the answer's.
  const waiting = await inferStandIn(t, node, 'keepalives', forever({ type: 'keepalive' }, 100))
  const events: InferenceEvent[] = []
  await assert.rejects(async () => {
    for await (const event of requestInference(node.node.network, waiting.nodeID, ask(waiting.model), { answerDeadlineMs: deadlineMs })) events.push(event)
  }, (err: unknown) => err instanceof ProtocolError && err.code === 'timeout' && late.test(err.message))
  assert.equal(events.length, 0)
  await waitFor(() => waiting.outcome === 'cut', { what: 'the stand-in to see its stream reset' })

  // A trickle of deltas, well within every size bound, that never ends.
  const trickle = await inferStandIn(t, node, 'trickle', forever({ type: 'delta', text: 'x' }, 50))
  await assert.rejects(async () => {
    for await (const event of requestInference(node.node.network, trickle.nodeID, ask(trickle.model), { answerDeadlineMs: deadlineMs })) events.push(event)
  }, (err: unknown) => err instanceof ProtocolError && err.code === 'timeout' && late.test(err.message))
  assert.ok(events.length > 0, 'deltas came until the deadline')
  await waitFor(() => trickle.outcome === 'cut', { what: 'the stand-in to see its stream reset' })

  // The router takes the deadline from its composition and fails over past a peer that missed it.
  const local: PeerRouterDeps['local'] = {
    serves: () => false,
    models: () => [],
    route: () => { throw new Error('not local') },
    notServed: (modelID: string) => new NotFoundError(`Model ${modelID} not found`)
  }
  const router = new PeerRouter({
    local, network: node.node.network, demand: { record: () => {} }, settings: { get: () => ({ inference_backend: 'auto' }) },
    sameModel: (a, b) => a === b, log: pino({ level: 'silent' })
  }, { answerDeadlineMs: deadlineMs })
  const routed = router.route({ modelID: waiting.model, kind: 'chat', messages: [{ role: 'user', content: 'Talk.' }] })
  await assert.rejects(async () => { for (let next = await routed.events.next(); next.done !== true; next = await routed.events.next()) events.push(next.value) },
    (err: Error) => err.name === 'UnavailableError' && late.test(err.message))

  assert.equal(node.node.network.isBanned(waiting.nodeID), false, 'slow is no offence')
  assert.equal(node.node.network.isBanned(trickle.nodeID), false)
  assert.equal((await node.api.get('/health')).status, 200)
})
