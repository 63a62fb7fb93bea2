// The infer and capabilities protocols facing broken and hostile peers, on in-memory stream pairs (@libp2p/utils):
// each handler is built from real parts (the serving policy over a real engine and settings, the peer table over real
// admission), and what a peer sends badly costs it a ProtocolError of a kind the network bans for. The full-node cases
// (a ban that holds, a forged record fetched from a peer) are in hostile.test.ts.
import assert from 'node:assert/strict'
import { join } from 'node:path'
import { test, type TestContext } from 'node:test'
import type { Connection } from '@libp2p/interface'
import { streamPair } from '@libp2p/utils'
import { pino } from 'pino'
import { z } from 'zod'
import { generateSeed, identityFromSeed } from '../../src/identity/index.ts'
import { LocalEngine } from '../../src/inference/index.ts'
import type { PeerStreams } from '../../src/wire/index.ts'
import { DemandTracker, sameModel } from '../../src/models/index.ts'
import { Admission } from '../../src/network/peers/admission.ts'
import { CAPABILITIES_PROTOCOL, createCapabilitiesHandler, pushCapabilities, signCapabilities } from '../../src/network/peers/capabilities.ts'
import { INFER_PROTOCOL, INFER_PROTOCOL_CHAT, INFER_PROTOCOL_REASONING, InferFrame, createInferHandler, requestInference, type InferAsk } from '../../src/remote/infer.ts'
import { MAX_EMBEDDING_INPUTS, MAX_EMBEDDING_LENGTH, MAX_LOGIT_BIAS_ENTRIES, MAX_TOOLS, MAX_TOOL_CALL_ID_CHARS, MAX_TOOL_NAME_CHARS, type InferenceEvent } from '../../src/inference/index.ts'
import { PeerTable } from '../../src/network/peers/peer-table.ts'
import { ServingPolicy } from '../../src/serving/index.ts'
import { SettingsStore } from '../../src/settings/index.ts'
import { openDatabase } from '../../src/store/index.ts'
import { ProtocolError, isHostile, openFrames, readMessage, signEnvelope, writeMessage } from '../../src/wire/index.ts'
import { tempDir } from '../support/node.ts'
import { standInRecord } from '../support/stand-in.ts'
import { TINY_MODEL_ID } from '../support/chat-node.ts'
import { writeTinyGguf } from '../support/tiny-gguf.ts'

const log = pino({ level: 'silent' })
const me = identityFromSeed(generateSeed())
const peer = identityFromSeed(generateSeed())

/** The serving side of the infer protocol, from real parts: settings on a temp database, an engine, the policy. */
async function inferServer (t: TestContext, options: { model?: boolean, member?: boolean } = {}): Promise<{ handler: ReturnType<typeof createInferHandler>, settings: SettingsStore, demand: DemandTracker, engine: LocalEngine }> {
  const db = openDatabase(join(await tempDir(t), 'meshnode.db'))
  t.after(() => { db.close() })
  const settings = new SettingsStore({ db })
  const engine = new LocalEngine({}, { threads: 1, slots: 1 })
  t.after(() => engine.close())
  if (options.model === true) await engine.load(TINY_MODEL_ID, (await writeTinyGguf(join(await tempDir(t, 'meshnode-model-'), 'tiny.gguf'), { seed: 7, contextLength: 4096 })).path)
  const demand = new DemandTracker()
  // A member: the peer's certificates proved it a member of a PTN this node is in.
  const policy = new ServingPolicy({
    engine, sameModel, settings, ptn: { memberPtnIDs: () => ['ptn-1'] }, peers: { peer: () => ({ ptnIDs: options.member === true ? ['ptn-1'] : [] }) }, recordDemand: (modelID) => { demand.record(modelID) }, log
  })
  return { handler: createInferHandler({ policy, log }), settings, demand, engine }
}

/** Runs the handler on one end of a pair, as the peer `peer`; resolves to what it threw, or null. */
async function serveOnPair (handler: ReturnType<typeof createInferHandler>): Promise<{ asker: Awaited<ReturnType<typeof streamPair>>[0], served: Promise<unknown> }> {
  const [asker, server] = await streamPair({ protocol: INFER_PROTOCOL })
  const served = handler(server, { nodeID: peer.nodeID, connection: null as never }).then(() => null, (err: unknown) => {
    server.abort(err instanceof Error ? err : new Error(String(err)))
    return err
  })
  return { asker, served }
}

const ask = (request: object = { messages: [{ role: 'user', content: 'hi' }], maxTokens: 2 }): object => ({ modelID: TINY_MODEL_ID, request, ptnID: null })

test('infer: a malformed, oversized or invalid request is a ProtocolError the network bans for', async (t) => {
  const { handler } = await inferServer(t)
  for (const [what, send, code] of [
    ['malformed (not JSON)', async (frames: ReturnType<typeof openFrames>) => { await frames.lp.write(new TextEncoder().encode('{"modelID": "tiny-chat", ')) }, 'malformed'],
    ['oversized (a 3 MiB frame)', async (frames: ReturnType<typeof openFrames>) => { await frames.lp.write(new Uint8Array(3 * 1024 * 1024).fill(0x20)) }, 'too_large'],
    ['invalid (wrong shape)', async (frames: ReturnType<typeof openFrames>) => { await writeMessage(frames, ask({ messages: 'hi' })) }, 'invalid'],
    ['invalid (five stop strings)', async (frames: ReturnType<typeof openFrames>) => { await writeMessage(frames, ask({ messages: [{ role: 'user', content: 'hi' }], stop: ['a', 'b', 'c', 'd', 'e'] })) }, 'invalid']
  ] as const) {
    const { asker, served } = await serveOnPair(handler)
    const frames = openFrames(asker, { maxFrameBytes: 8 * 1024 * 1024 })
    await send(frames).catch(() => undefined)   // the handler may reset the stream while we are still writing
    const err = await served
    assert.ok(err instanceof ProtocolError && err.code === code && isHostile(err), `${what}: ${String(err)}`)
    await assert.rejects(readMessage(frames, z.unknown(), { timeoutMs: 5_000 }), `${what}: no answer but a reset`)
  }
})

test('infer: a request the serving policy refuses gets an error frame, not a reset; its demand is counted', async (t) => {
  const { handler, settings, demand } = await inferServer(t)
  const answer = async (): Promise<z.infer<typeof InferFrame>> => {
    const { asker, served } = await serveOnPair(handler)
    const frames = openFrames(asker, { maxFrameBytes: 64 * 1024 })
    await writeMessage(frames, ask())
    await asker.close()
    const frame = await readMessage(frames, InferFrame, { timeoutMs: 5_000 })
    assert.equal(await served, null, 'the handler ended normally')
    return frame
  }
  const none = await answer()
  assert.equal(none.type, 'error')
  assert.equal(none.type === 'error' ? none.kind : null, 'unavailable')
  assert.deepEqual(demand.list(), [{ modelID: TINY_MODEL_ID, requests: 1 }])
  settings.update({ inference_backend: 'peers' })
  const peersOnly = await answer()
  assert.match(peersOnly.type === 'error' ? peersOnly.message : '', /inference_backend is peers/)
})

test('infer: outsiders beyond their share of the slots are told busy, with a time to retry', async (t) => {
  const { handler, settings, engine } = await inferServer(t, { model: true })
  settings.update({ org_capacity_reservation: 1 })   // the only slot is kept for members
  const { asker, served } = await serveOnPair(handler)
  const frames = openFrames(asker, { maxFrameBytes: 64 * 1024 })
  await writeMessage(frames, ask())
  await asker.close()
  const frame = await readMessage(frames, InferFrame, { timeoutMs: 5_000 })
  assert.equal(frame.type, 'error')
  if (frame.type !== 'error') return
  assert.equal(frame.kind, 'busy')
  assert.ok((frame.retryAfterSeconds ?? 0) >= 1)
  assert.equal(await served, null)
  assert.equal(engine.stats().busySlots, 0, 'nothing ran')
})

const hi = [{ role: 'user', content: 'hi' }]
const weather = { name: 'get_weather', parameters: { type: 'object', properties: { city: { enum: ['Paris', 'Lima'] } }, required: ['city'] } }

/** Sends one request frame to the handler and reads every answer frame up to the last; the handler must end normally. */
async function answerTo (handler: ReturnType<typeof createInferHandler>, request: object): Promise<InferFrame[]> {
  const { asker, served } = await serveOnPair(handler)
  const frames = openFrames(asker, { maxFrameBytes: 1024 * 1024 })
  await writeMessage(frames, request)
  await asker.close()
  const answer: InferFrame[] = []
  for (;;) {
    const frame = await readMessage(frames, InferFrame, { timeoutMs: 60_000 })
    answer.push(frame)
    if (frame.type === 'done' || frame.type === 'error') break
  }
  assert.equal(await served, null, 'the handler ended normally')
  return answer
}

test('infer 1.1.0: requests of the new kinds past the domain\'s limits are ProtocolErrors the network bans for', async (t) => {
  const { handler, engine } = await inferServer(t)
  const tool = (name: string): object => ({ name, parameters: { type: 'object' } })
  for (const [what, request] of [
    [`${MAX_TOOLS + 1} tools`, { kind: 'chat', messages: hi, tools: Array.from({ length: MAX_TOOLS + 1 }, (_, i) => tool(`t${i}`)) }],
    ['a tool name too long', { kind: 'chat', messages: hi, tools: [tool('x'.repeat(MAX_TOOL_NAME_CHARS + 1))] }],
    ['a tool call id too long', { kind: 'chat', messages: [...hi, { role: 'tool', content: '1', toolCallID: 'x'.repeat(MAX_TOOL_CALL_ID_CHARS + 1) }] }],
    ['a tool choice of the wrong shape', { kind: 'chat', messages: hi, tools: [tool('a')], toolChoice: { type: 'function' } }],
    [`${MAX_LOGIT_BIAS_ENTRIES + 1} logit_bias entries`, { kind: 'chat', messages: hi, logitBias: Object.fromEntries(Array.from({ length: MAX_LOGIT_BIAS_ENTRIES + 1 }, (_, i) => [String(i), -1])) }],
    ['a logit_bias out of range', { kind: 'chat', messages: hi, logitBias: { 5: 101 } }],
    [`${MAX_EMBEDDING_INPUTS + 1} embedding inputs`, { kind: 'embeddings', input: Array.from({ length: MAX_EMBEDDING_INPUTS + 1 }, () => 'x') }],
    ['no embedding input', { kind: 'embeddings', input: [] }],
    ['embedding input as token ids', { kind: 'embeddings', input: [[1, 2, 3]] }],
    ['a completion without a prompt', { kind: 'completion', suffix: 'x' }],
    ['a completion prompt of the wrong type', { kind: 'completion', prompt: 42 }],
    ['an unknown kind', { kind: 'images', prompt: 'a cat' }]
  ] as const) {
    const { asker, served } = await serveOnPair(handler)
    const frames = openFrames(asker, { maxFrameBytes: 8 * 1024 * 1024 })
    await writeMessage(frames, ask(request)).catch(() => undefined)
    const err = await served
    assert.ok(err instanceof ProtocolError && err.code === 'invalid' && isHostile(err), `${what}: ${String(err)}`)
    await assert.rejects(readMessage(frames, z.unknown(), { timeoutMs: 5_000 }), `${what}: no answer but a reset`)
  }
  assert.equal(engine.stats().busySlots, 0)
})

test('infer 1.1.0: well-formed requests the model cannot honour get an error frame naming the parameter; then tools and embeddings are served', async (t) => {
  const { handler, engine } = await inferServer(t, { model: true })
  for (const [request, param] of [
    [{ kind: 'chat', messages: hi, tools: [weather], toolChoice: { name: 'nope' } }, 'tool_choice'],
    [{ kind: 'chat', messages: hi, tools: [{ name: 'bad name!' }] }, 'tools.0.function.name'],
    [{ kind: 'completion', prompt: 'def f():', suffix: 'return 1', maxTokens: 2 }, 'suffix'],
    [{ kind: 'embeddings', input: ['fine', ''] }, 'input.1']
  ] as const) {
    const answer = await answerTo(handler, ask(request))
    assert.equal(answer.length, 1, JSON.stringify(answer))
    const [frame] = answer
    assert.ok(frame.type === 'error' && frame.kind === 'invalid', JSON.stringify(frame))
    assert.equal(frame.param, param)
  }
  assert.equal(engine.stats().busySlots, 0, 'nothing ran')

  const call = await answerTo(handler, ask({ kind: 'chat', messages: hi, tools: [weather], toolChoice: { name: 'get_weather' }, temperature: 0 }))
  const last = call.at(-1)
  assert.ok(last?.type === 'done' && last.finishReason === 'tool_calls', JSON.stringify(last))
  const opened = call.filter(f => f.type === 'tool_call')
  assert.equal(opened.length, 1)
  assert.deepEqual(call.filter(f => f.type === 'delta'), [], 'a call, no text')
  const args = call.map(f => f.type === 'tool_arguments' ? f.text : '').join('')
  assert.ok(['Paris', 'Lima'].includes((JSON.parse(args) as { city: string }).city), args)

  const vectors = await answerTo(handler, ask({ kind: 'embeddings', input: ['a', 'b'] }))
  assert.deepEqual(vectors.filter(f => f.type === 'embedding').map(f => f.type === 'embedding' ? f.index : -1).sort(), [0, 1])
  const done = vectors.at(-1)
  assert.ok(done?.type === 'done' && done.usage.promptTokens > 0 && done.usage.completionTokens === 0)
})

/**
 * A peer whose answer is `answer`, whatever it is asked, on the first version offered; records the versions it was
 * offered and what it was reported for.
 */
function scriptedPeer (answer: object[]): { peers: PeerStreams, protocols: Array<string | string[]>, reported: unknown[] } {
  const protocols: Array<string | string[]> = []
  const reported: unknown[] = []
  const peers: PeerStreams = {
    open: async (_nodeID, protocol) => {
      protocols.push(protocol)
      const [asker, server] = await streamPair({ protocol: [protocol].flat()[0] })
      void (async () => {
        const frames = openFrames(server, { maxFrameBytes: 8 * 1024 * 1024 })
        await readMessage(frames, z.unknown())
        for (const frame of answer) await writeMessage(frames, frame)
        await server.close()
      })().catch(() => undefined)
      return asker
    },
    reportMisbehaviour: async (_nodeID, err) => { reported.push(err) }
  }
  return { peers, protocols, reported }
}

async function drain (events: AsyncIterable<InferenceEvent>): Promise<InferenceEvent[]> {
  const seen: InferenceEvent[] = []
  for await (const event of events) seen.push(event)
  return seen
}

test('infer requester: every request offers 1.2.0 first (thoughts reach the requester), then what older peers serve: a plain chat down to 1.0.0, anything else down to 1.1.0, a thought budget only 1.2.0', async () => {
  const done = { type: 'done', finishReason: 'stop', usage: { promptTokens: 1, completionTokens: 1, totalTokens: 2 } }
  const all = [INFER_PROTOCOL_REASONING, INFER_PROTOCOL, INFER_PROTOCOL_CHAT]
  const newer = [INFER_PROTOCOL_REASONING, INFER_PROTOCOL]
  for (const [request, protocol] of [
    [{ kind: 'chat', messages: hi }, all],
    [{ kind: 'chat', messages: hi, tools: [weather] }, newer],
    [{ kind: 'chat', messages: hi, logitBias: { 5: -100 } }, newer],
    [{ kind: 'chat', messages: [...hi, { role: 'tool', content: '1', toolCallID: 'call_1' }] }, newer],
    [{ kind: 'completion', prompt: 'x' }, newer],
    [{ kind: 'chat', messages: hi, thoughtTokens: 16 }, [INFER_PROTOCOL_REASONING]]
  ] as const) {
    const { peers, protocols } = scriptedPeer([{ type: 'delta', text: 'ok' }, done])
    const events = await drain(requestInference(peers, peer.nodeID, { modelID: TINY_MODEL_ID, request, ptnID: null } as InferAsk))
    assert.deepEqual(protocols, [protocol], JSON.stringify(request))
    assert.deepEqual(events.map(e => e.type), ['delta', 'done'])
  }
})

test('infer requester: an answer out of protocol for its request is a ProtocolError, and the peer is reported', async () => {
  const done = (finishReason = 'stop'): object => ({ type: 'done', finishReason, usage: { promptTokens: 1, completionTokens: 1, totalTokens: 2 } })
  const chat = { kind: 'chat', messages: hi, tools: [weather] }
  const plain = { kind: 'chat', messages: hi }
  const embed = { kind: 'embeddings', input: ['a', 'b'] }
  const call = { type: 'tool_call', index: 0, id: 'call_1', name: 'get_weather' }
  for (const [what, request, answer] of [
    ['arguments for a call never opened', chat, [{ type: 'tool_arguments', index: 0, text: '{' }, done('tool_calls')]],
    ['calls opened out of order', chat, [{ ...call, index: 1 }, done('tool_calls')]],
    ['a tool call to a request without tools', plain, [call, done('tool_calls')]],
    ['tool_calls without a call', chat, [done('tool_calls')]],
    ['a vector in a chat answer', plain, [{ type: 'embedding', index: 0, vector: [1] }, done()]],
    ['text in an embeddings answer', embed, [{ type: 'delta', text: 'x' }, done()]],
    ['a vector for an input not asked', embed, [{ type: 'embedding', index: 2, vector: [1] }, done()]],
    ['two vectors for one input', embed, [{ type: 'embedding', index: 0, vector: [1] }, { type: 'embedding', index: 0, vector: [1] }, done()]],
    ['vectors of different lengths', embed, [{ type: 'embedding', index: 0, vector: [1] }, { type: 'embedding', index: 1, vector: [1, 2] }, done()]],
    ['done before every vector', embed, [{ type: 'embedding', index: 0, vector: [1] }, done()]],
    ['a vector too long', embed, [{ type: 'embedding', index: 0, vector: Array.from({ length: MAX_EMBEDDING_LENGTH + 1 }, () => 0) }, done()]],
    ['an unknown frame', plain, [{ type: 'image', data: 'x' }, done()]]
  ] as const) {
    const { peers, reported } = scriptedPeer(answer as unknown as object[])
    await assert.rejects(drain(requestInference(peers, peer.nodeID, { modelID: TINY_MODEL_ID, request, ptnID: null } as InferAsk)), (err: unknown) => {
      assert.ok(err instanceof ProtocolError && isHostile(err), `${what}: ${String(err)}`)
      return true
    }, what)
    assert.equal(reported.length, 1, `${what}: the peer is reported`)
  }
  // The same shapes in order are accepted: a call, its arguments, done; two vectors of one length, done.
  const good = scriptedPeer([call, { type: 'tool_arguments', index: 0, text: '{"city":' }, { type: 'tool_arguments', index: 0, text: '"Paris"}' }, done('tool_calls')])
  assert.deepEqual((await drain(requestInference(good.peers, peer.nodeID, { modelID: TINY_MODEL_ID, request: chat, ptnID: null } as InferAsk))).map(e => e.type), ['tool_call', 'tool_arguments', 'tool_arguments', 'done'])
  const vectors = scriptedPeer([{ type: 'embedding', index: 1, vector: [3, 4] }, { type: 'embedding', index: 0, vector: [1, 2] }, done()])
  assert.equal((await drain(requestInference(vectors.peers, peer.nodeID, { modelID: TINY_MODEL_ID, request: embed, ptnID: null } as InferAsk))).length, 3)
  assert.equal(good.reported.length + vectors.reported.length, 0)
})

/** A peer table of `me` that admits WAN peers, and a capabilities handler feeding it, on a stream pair per call. */
function recordsServer (): { table: PeerTable, admission: Admission, push: (envelope: unknown) => Promise<unknown>, link: { connected: boolean } } {
  const admission = new Admission({ self: me.nodeID, log })
  // The peer's connection, as libp2p's connection manager lists it: the stream pairs below stand for its streams.
  const link = { connected: true }
  admission.setWan(true)
  const table = new PeerTable({
    admission,
    openStream: async () => { throw new Error('no fetches in this test') },
    ping: async () => { throw new Error('no pings in this test') },
    connections: () => link.connected ? [{ status: 'open', rtt: undefined } as unknown as Connection] : [],
    misbehaved: async () => undefined,
    log
  })
  table.start()
  const handler = createCapabilitiesHandler({ current: () => signCapabilities(me, standInRecord(me)), received: (nodeID, record) => { table.received(nodeID, record) } })
  const push = async (envelope: unknown): Promise<unknown> => {
    const [asker, server] = await streamPair({ protocol: CAPABILITIES_PROTOCOL })
    const served = handler(server, { nodeID: peer.nodeID }).then(() => null, (err: unknown) => {
      server.abort(err instanceof Error ? err : new Error(String(err)))
      return err
    })
    await pushCapabilities(asker, envelope as never).catch(() => undefined)
    return await served
  }
  return { table, admission, push, link }
}

test('capabilities: a forged record pushed by a peer is a ProtocolError the network bans for, and never enters the table', async () => {
  const { table, push } = recordsServer()
  const record = standInRecord(peer)
  const other = identityFromSeed(generateSeed())
  for (const [what, envelope] of [
    ['signed by another key', { ...signEnvelope(other, record, { domain: CAPABILITIES_PROTOCOL }), signer: peer.nodeID }],
    ['a valid signature over other content', { ...signCapabilities(peer, record), body: { ...record, pricePer1kTokensMicro: 1 } }],
    ['unsigned', { body: record, signer: peer.nodeID }],
    ['signed for another protocol', signEnvelope(peer, record, { domain: INFER_PROTOCOL })],
    ['claiming another node', signCapabilities(peer, standInRecord(peer, { nodeID: other.nodeID }))],
    ['someone else\'s genuine record', signCapabilities(other, standInRecord(other))]
  ] as const) {
    const err = await push(envelope)
    assert.ok(isHostile(err), `${what}: ${String(err)}`)
    assert.equal(table.has(peer.nodeID), false, what)
  }
})

test('capabilities: pushed records are kept by version: a newer one replaces, the same or an older one changes nothing', async () => {
  const { table, push } = recordsServer()
  const events: string[] = []
  table.on('peer:online', (info) => { events.push(`online ${info.record.version}`) })
  table.on('peer:updated', (info) => { events.push(`updated ${info.record.version}`) })
  for (const version of [5, 5, 4, 7, 6]) assert.equal(await push(signCapabilities(peer, standInRecord(peer, { version, name: `v${version}` }))), null)
  assert.deepEqual(events, ['online 5', 'updated 7'])
  assert.equal(table.peer(peer.nodeID)?.record.name, 'v7')
})

test('capabilities: a record that arrives after the peer\'s last connection closed does not bring it back', async () => {
  const { table, push, link } = recordsServer()
  assert.equal(await push(signCapabilities(peer, standInRecord(peer, { version: 1 }))), null)
  assert.equal(table.has(peer.nodeID), true)
  // Its connection closes while a push (or a fetch) of a newer record is still on its way.
  link.connected = false
  table.disconnected(peer.nodeID)
  assert.equal(await push(signCapabilities(peer, standInRecord(peer, { version: 2 }))), null)
  assert.equal(table.has(peer.nodeID), false, 'nothing would ever drop it again: its disconnect has passed')
  // Connected again, its record is taken as from any new peer.
  link.connected = true
  assert.equal(await push(signCapabilities(peer, standInRecord(peer, { version: 3 }))), null)
  assert.equal(table.peer(peer.nodeID)?.record.version, 3)
})
