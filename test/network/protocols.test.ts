// The infer and capabilities protocols facing broken and hostile peers, on in-memory stream pairs (@libp2p/utils):
// each handler is built from real parts (the serving policy over a real engine and settings, the peer table over real
// admission), and what a peer sends badly costs it a ProtocolError of a kind the network bans for. The full-node cases
// (a ban that holds, a forged record fetched from a peer) are in hostile.test.ts.
import assert from 'node:assert/strict'
import { join } from 'node:path'
import { test, type TestContext } from 'node:test'
import { streamPair } from '@libp2p/utils'
import { pino } from 'pino'
import { z } from 'zod'
import { generateSeed, identityFromSeed } from '../../src/identity/index.ts'
import { LocalEngine } from '../../src/inference/index.ts'
import { DemandTracker, sameModel } from '../../src/models/index.ts'
import { Admission } from '../../src/network/admission.ts'
import { CAPABILITIES_PROTOCOL, createCapabilitiesHandler, pushCapabilities, signCapabilities } from '../../src/network/capabilities.ts'
import { INFER_PROTOCOL, InferFrame, createInferHandler } from '../../src/network/infer.ts'
import { PeerTable } from '../../src/network/peer-table.ts'
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
  if (options.model === true) await engine.load(TINY_MODEL_ID, (await writeTinyGguf(join(await tempDir(t, 'meshnode-model-'), 'tiny.gguf'), { seed: 7 })).path)
  const demand = new DemandTracker()
  const policy = new ServingPolicy({ engine, sameModel, settings, isPtnMember: () => options.member === true, recordDemand: (modelID) => { demand.record(modelID) }, log })
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

/** A peer table of `me` that admits WAN peers, and a capabilities handler feeding it, on a stream pair per call. */
function recordsServer (): { table: PeerTable, admission: Admission, push: (envelope: unknown) => Promise<unknown> } {
  const admission = new Admission({ self: me.nodeID, log })
  admission.setWan(true)
  const table = new PeerTable({
    admission,
    openStream: async () => { throw new Error('no fetches in this test') },
    ping: async () => { throw new Error('no pings in this test') },
    connections: () => [],
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
  return { table, admission, push }
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
