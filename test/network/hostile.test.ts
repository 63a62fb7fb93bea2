import { test, type TestContext } from 'node:test'
import assert from 'node:assert/strict'
import { join } from 'node:path'
import OpenAI from 'openai'
import type { NodeIdentity } from '../../src/identity/index.ts'
import { CAPABILITIES_PROTOCOL, MAX_ADVERTISED_CERTIFICATES, signCapabilities, type CapabilityRecord } from '../../src/network/peers/capabilities.ts'
import { openFrames, readMessage, writeMessage } from '../../src/wire/index.ts'
import { INFER_PROTOCOL } from '../../src/remote/infer.ts'
import { handleProtocol, peerIdFromIdentity } from '../../src/network/host/libp2p-node.ts'
import { startTestNode, tempDir, waitFor, type TestNode } from '../support/node.ts'
import { FAST_NETWORK, startTestRelay, waitForPeers, wanSettings } from '../support/network.ts'
import { directAddrs, standInHost, standInRecord, type StandIn } from '../support/stand-in.ts'
import { writeTinyGguf } from '../support/tiny-gguf.ts'
import { z } from 'zod'

const MODEL = 'tiny-chat'

type Hostile = StandIn

/** A raw libp2p host with a node key of its own, speaking our protocols badly on purpose. */
async function hostilePeer (t: TestContext): Promise<Hostile> {
  return await standInHost(t)
}

/** Connects the hostile peer to the node; retried, because the node takes at most a few new connections per second
 *  from one address (libp2p's inbound threshold), and every hostile peer of this test comes from 127.0.0.1. */
async function connect (hostile: Hostile, node: TestNode): Promise<void> {
  await waitFor(async () => {
    try {
      await hostile.host.dial(directAddrs(node), { signal: AbortSignal.timeout(5_000) })
      return true
    } catch (err) {
      if ((err as Error).message.includes('ECONNRESET') || (err as Error).name === 'AggregateError') return false
      throw err
    }
  }, { what: 'the hostile peer to connect' })
}

function record (identity: NodeIdentity, overrides: Partial<CapabilityRecord> = {}): CapabilityRecord {
  return standInRecord(identity, { name: 'hostile', models: { loaded: MODEL, downloaded: [MODEL] }, capacity: { slots: 8, busySlots: 0, queued: 0, reservedSlots: 0 }, ...overrides })
}

/** The node dropped the hostile peer and refuses it from now on. */
async function assertDisconnectedAndBanned (node: TestNode, hostile: Hostile): Promise<void> {
  const peerId = peerIdFromIdentity(hostile.identity)
  await waitFor(() => node.node.network.host.getConnections(peerId).length === 0, { what: 'the node to hang up on the hostile peer' })
  assert.equal(node.node.network.isKnownPeer(hostile.identity.nodeID), false)
  assert.equal(node.node.network.isBanned(hostile.identity.nodeID), true)
  await assert.rejects(async () => {
    const connection = await hostile.host.dial(directAddrs(node), { signal: AbortSignal.timeout(5_000) })
    // An encrypted connection the gater refuses is closed right after the handshake; a stream on it must fail.
    await connection.newStream(INFER_PROTOCOL, { signal: AbortSignal.timeout(5_000) })
  }, 'a banned peer cannot come back')
}

test('hostile peers: malformed, oversized, invalid and unsigned or forged messages are refused; the node keeps serving', async (t) => {
  const relay = await startTestRelay(t)
  const { path } = await writeTinyGguf(join(await tempDir(t, 'meshnode-model-'), 'tiny.gguf'), { seed: 7 })
  const server = await startTestNode(t, { network: FAST_NETWORK })
  await server.node.engine.load(MODEL, path)
  await server.api.patch('/v1/app/settings', wanSettings(relay))
  const client = await startTestNode(t, { network: FAST_NETWORK })
  await client.api.patch('/v1/app/settings', wanSettings(relay))
  await waitForPeers(client, [server.nodeID])
  const openai = new OpenAI({ baseURL: `${client.node.url}/v1`, apiKey: 'x', maxRetries: 0 })

  // Every kind of bad frame and forged record, on stream pairs: test/network/protocols.test.ts. Here, one of each
  // through a real node: the ban holds, and the node keeps serving.
  for (const [name, send] of [
    ['oversized frame (a 3 MiB length prefix)', async (frames: ReturnType<typeof openFrames>) => { await frames.lp.write(new Uint8Array(3 * 1024 * 1024).fill(0x20)) }]
  ] as const) {
    await t.test(`${name} on the inference protocol`, async () => {
      const hostile = await hostilePeer(t)
      await connect(hostile, server)
      const stream = await hostile.host.dialProtocol(peerIdFromIdentity(server.node.identity), INFER_PROTOCOL)
      const frames = openFrames(stream, { maxFrameBytes: 8 * 1024 * 1024 })
      await send(frames).catch(() => undefined)   // the node may reset the stream while we are still writing
      await assert.rejects(readMessage(frames, z.unknown(), { timeoutMs: 10_000 }), 'no answer but a reset')
      await assertDisconnectedAndBanned(server, hostile)
    })
  }

  const forgeries: Array<[string, (hostile: Hostile) => unknown]> = [
    ['a valid signature over other content', (hostile) => ({ ...signCapabilities(hostile.identity, record(hostile.identity)), body: record(hostile.identity, { pricePer1kTokensMicro: 1 }) })],
    // Signed, but with more certificates than a record may carry (a node of ours never sends one).
    ['with more PTN certificates than a record carries', (hostile) => signCapabilities(hostile.identity, record(hostile.identity, { ptnCertificates: Array.from({ length: MAX_ADVERTISED_CERTIFICATES + 1 }, (_, i) => `cert-${i}`) }))]
  ]
  for (const [name, forge] of forgeries) {
    await t.test(`a capability record ${name} keeps the peer out of the table`, async () => {
      const hostile = await hostilePeer(t)
      let served = 0
      await handleProtocol(hostile.host, CAPABILITIES_PROTOCOL, async (stream) => {
        served++
        const frames = openFrames(stream)
        await readMessage(frames, z.unknown())
        await writeMessage(frames, forge(hostile))
        await stream.close()
      }, { maxInboundStreams: 4 })
      await connect(hostile, server)
      await waitFor(() => served > 0, { what: 'the node to fetch the hostile record' })
      await assertDisconnectedAndBanned(server, hostile)
      assert.ok(!(await server.api.get('/v1/app/peers')).body.peers.some((p: { nodeID: string }) => p.nodeID === hostile.identity.nodeID))
    })
  }

  await t.test('the node still serves: health, and its peer\'s chat request', async () => {
    assert.equal((await server.api.get('/health')).status, 200)
    assert.ok(client.node.network.isKnownPeer(server.nodeID))
    const { data, response } = await openai.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 }).withResponse()
    assert.equal(response.headers.get('x-served-by'), `peer:${server.nodeID}`)
    assert.equal(data.usage?.completion_tokens, 4)
  })
})
