import assert from 'node:assert/strict'
import { createHash, randomBytes } from 'node:crypto'
import { test, type TestContext } from 'node:test'
import type { PeerId, Stream } from '@libp2p/interface'
import { pino } from 'pino'
import { z } from 'zod'
import { generateSeed, identityFromSeed, type NodeIdentity } from '../../src/identity/index.ts'
import { DIRECTORY_PROTOCOL, listDirectory, registerInDirectory, signDirectoryRecord } from '../../src/network/relay/directory.ts'
import { ProtocolError } from '../../src/wire/index.ts'
import { openFrames, readMessage, signEnvelope, writeMessage } from '../../src/wire/index.ts'
import { createPeerHost, handleProtocol, nodeIDToPeerId, openStream, peerIdFromIdentity, peerIdToNodeID, type PeerHost } from '../../src/network/host/libp2p-node.ts'
import { relayMultiaddrFromUrl, startRelay, type RunningRelay } from '../../src/network/relay/relay.ts'
import { WanClient } from '../../src/network/wan/wan.ts'
import { waitFor } from '../support/node.ts'

const log = pino({ level: process.env.MESHNODE_TEST_LOG ?? 'silent' })

function isProtocolError (code: ProtocolError['code']): (err: unknown) => boolean {
  return (err) => {
    assert.ok(err instanceof ProtocolError, `expected a ProtocolError, got ${String(err)}`)
    assert.equal(err.code, code, err.message)
    return true
  }
}

await test('the libp2p peer id is the node key', () => {
  const identity = identityFromSeed(generateSeed())
  const peerId = peerIdFromIdentity(identity)
  assert.equal(peerId.type, 'Ed25519')
  assert.deepEqual(new Uint8Array(peerId.publicKey.raw), new Uint8Array(identity.publicKey))
  assert.equal(peerIdToNodeID(peerId), identity.nodeID)
  assert.ok(nodeIDToPeerId(identity.nodeID).equals(peerId))
  assert.throws(() => nodeIDToPeerId('not-a-node-id'), { name: 'InvalidInputError' })
})

await test('relayMultiaddrFromUrl', () => {
  const peerId = peerIdFromIdentity(identityFromSeed(generateSeed())).toString()
  assert.equal(relayMultiaddrFromUrl('ws://127.0.0.1:4001').toString(), '/ip4/127.0.0.1/tcp/4001/ws')
  assert.equal(relayMultiaddrFromUrl('wss://relay.example:443').toString(), '/dns/relay.example/tcp/443/tls/ws')
  assert.equal(relayMultiaddrFromUrl('ws://127.0.0.1:4001', peerId).toString(), `/ip4/127.0.0.1/tcp/4001/ws/p2p/${peerId}`)
  assert.equal(relayMultiaddrFromUrl(`/ip4/127.0.0.1/tcp/4001/ws/p2p/${peerId}`).toString(), `/ip4/127.0.0.1/tcp/4001/ws/p2p/${peerId}`)
  assert.throws(() => relayMultiaddrFromUrl('http://127.0.0.1:4001'), { name: 'InvalidInputError' })
  assert.throws(() => relayMultiaddrFromUrl('ws://127.0.0.1:4001/some/path'), { name: 'InvalidInputError' })
  assert.throws(() => relayMultiaddrFromUrl('/not/a/multiaddr'), { name: 'InvalidInputError' })
})

interface TestNode {
  name: string
  identity: NodeIdentity
  host: PeerHost
  wan: WanClient
}

// Test-only protocols, registered like real ones: on limited connections, with a stream limit.
const BULK_PROTOCOL = '/meshnode-test/bulk/1.0.0'
const BULK_CHUNKS = 64
const BULK_CHUNK_BYTES = 16 * 1024                                    // 64 × 16 KiB = 1 MiB, 8× libp2p's 128 KiB default
const BulkRequest = z.object({ chunks: z.number().int().min(1).max(1024) })
const BulkFrame = z.discriminatedUnion('type', [
  z.object({ type: z.literal('chunk'), data: z.base64() }),
  z.object({ type: z.literal('done'), sha256: z.string() })
])
function serveBulk (host: PeerHost): Promise<void> {
  return handleProtocol(host, BULK_PROTOCOL, async (stream: Stream) => {
    const frames = openFrames(stream, { maxFrameBytes: 64 * 1024 })
    try {
      const request = await readMessage(frames, BulkRequest)
      const hash = createHash('sha256')
      for (let i = 0; i < request.chunks; i++) {
        const chunk = randomBytes(BULK_CHUNK_BYTES)
        hash.update(chunk)
        await writeMessage(frames, { type: 'chunk', data: chunk.toString('base64') })
      }
      await writeMessage(frames, { type: 'done', sha256: hash.digest('hex') })
      await stream.close()
    } catch (err) {
      stream.abort(err instanceof Error ? err : new Error(String(err)))
    }
  }, { maxInboundStreams: 4 })
}

/** Asks for `chunks` random chunks and checks them against the final frame's hash; the final frame is what tells a
 *  complete answer from one a relay cut off. */
async function fetchBulk (host: PeerHost, peer: PeerId, count: number): Promise<{ chunks: number, bytes: number }> {
  const stream = await openStream(host, peer, BULK_PROTOCOL)
  const frames = openFrames(stream, { maxFrameBytes: 64 * 1024 })
  try {
    await writeMessage(frames, { chunks: count })
    await stream.close()
    const hash = createHash('sha256')
    let bytes = 0
    let chunks = 0
    for (;;) {
      const frame = await readMessage(frames, BulkFrame)
      if (frame.type === 'done') {
        assert.equal(frame.sha256, hash.digest('hex'))
        return { chunks, bytes }
      }
      const data = Buffer.from(frame.data, 'base64')
      hash.update(data)
      bytes += data.byteLength
      chunks++
    }
  } catch (err) {
    stream.abort(err instanceof Error ? err : new Error(String(err)))
    throw err
  }
}

function relayedOnly (from: PeerHost, to: PeerId): boolean {
  const connections = from.getConnections(to)
  return connections.length > 0 && connections.every(c => c.remoteAddr.toString().includes('/p2p-circuit'))
}

await test('nodes meet through the relay directory, stream 1 MiB over a relayed connection, and survive a relay restart', async (t: TestContext) => {
  const relaySeed = generateSeed()
  let relay: RunningRelay = await startRelay({ port: 0, seed: relaySeed, log })
  const relayPort = Number(new URL(relay.url).port)
  t.after(async () => { await relay.stop() })

  const nodes: TestNode[] = []
  for (const name of ['a', 'b', 'c']) {
    const identity = identityFromSeed(generateSeed())
    // No listen addresses: the only way to reach a node is its circuit address at the relay.
    const host = await createPeerHost(identity, { listen: [], relayUrl: relay.url, log })
    const wan = new WanClient({ host, identity, log }, {
      relayUrl: relay.url, syncIntervalMs: 1_000, fastSyncMs: 200, minBackoffMs: 100, maxBackoffMs: 1_000, dialTimeoutMs: 3_000
    })
    const node: TestNode = { name, identity, host, wan }
    nodes.push(node)
    t.after(async () => { await wan.stop(); await host.stop() })
  }
  const [a, b, c] = nodes
  await serveBulk(c.host)
  for (const node of nodes) await node.wan.start()

  const allMet = (): boolean => relay.directory.list().length === 3 &&
    nodes.every(node => node.wan.peers().length === 2 && nodes.every(other => other === node || node.host.getConnections(other.host.peerId).length > 0))

  await t.test('all three register and see each other', async () => {
    await waitFor(allMet, { what: 'every node to discover the other two' })
    assert.ok(a.wan.relayPeerId?.equals(relay.peerId), 'the node learned the relay peer id from a ws:// URL')
    const listed = new Set(relay.directory.list().map(envelope => envelope.signer))
    assert.deepEqual(listed, new Set(nodes.map(node => node.identity.nodeID)))
    const seenByA = a.wan.peers().find(peer => peer.nodeID === c.identity.nodeID)
    assert.ok(seenByA != null && seenByA.addrs.length > 0 && seenByA.addrs.every(addr => addr.includes('/p2p-circuit')))
  })

  await t.test('A receives a 1 MiB answer from C in many frames through the relay', async () => {
    assert.ok(relayedOnly(a.host, c.host.peerId), 'A and C are connected only through the relay')
    assert.ok(a.host.getConnections(c.host.peerId).every(connection => connection.limits == null), 'our relay sets no limits')
    const { chunks, bytes } = await fetchBulk(a.host, c.host.peerId, BULK_CHUNKS)
    assert.equal(chunks, BULK_CHUNKS)
    assert.equal(bytes, BULK_CHUNKS * BULK_CHUNK_BYTES)
    assert.ok(relayedOnly(a.host, c.host.peerId), 'the answer came over the relayed connection')
  })

  await t.test('forged or badly signed registrations are refused', async () => {
    const registered = (): Array<[string, string[]]> => relay.directory.list()
      .map(envelope => [envelope.signer, (envelope.body as { addrs: string[] }).addrs] as [string, string[]])
      .sort(([x], [y]) => x.localeCompare(y))
    const before = registered()
    const refused = isProtocolError('refused')
    // B's genuine record, sent by A: signed by a key other than the connection's peer.
    const bRecord = signDirectoryRecord(b.identity, ['/ip4/127.0.0.1/tcp/1'])
    await assert.rejects(registerInDirectory(a.host, relay.peerId, bRecord), refused)
    // A's own key, claiming B's nodeID.
    const claim = signEnvelope(a.identity, { nodeID: b.identity.nodeID, addrs: [], timestamp: Date.now() }, { domain: DIRECTORY_PROTOCOL })
    await assert.rejects(registerInDirectory(a.host, relay.peerId, claim), refused)
    // A's record with a signature that does not verify.
    const aRecord = signDirectoryRecord(a.identity, ['/ip4/127.0.0.1/tcp/2'])
    const signature = Buffer.from(aRecord.signature, 'base64')
    signature[0] ^= 0xff
    await assert.rejects(registerInDirectory(a.host, relay.peerId, { ...aRecord, signature: signature.toString('base64') }), refused)
    // A's record signed for another protocol.
    const otherDomain = signEnvelope(a.identity, aRecord.body, { domain: '/meshnode/other/1.0.0' })
    await assert.rejects(registerInDirectory(a.host, relay.peerId, otherDomain), refused)
    // The nodes keep renewing their records (new timestamps), but who is registered, and where, is unchanged.
    assert.deepEqual(registered(), before, 'nothing changed')
  })

  // Oversized, malformed, invalid, late and missing frames in general: test/wire/exchange.test.ts, on stream pairs.
  await t.test('the relay answers oversized and malformed frames by aborting the stream, and keeps serving', async () => {
    const relayPeer = relay.peerId
    for (const payload of [new Uint8Array(100_000).fill(0x20), new TextEncoder().encode('{"type":"list"')]) {
      const stream = await openStream(a.host, relayPeer, DIRECTORY_PROTOCOL)
      const frames = openFrames(stream, { maxFrameBytes: 1024 * 1024 })
      await frames.lp.write(payload)
      await assert.rejects(readMessage(frames, z.unknown(), { timeoutMs: 5_000 }), 'the relay answers a bad frame by aborting the stream')
      stream.abort(new Error('test done'))
    }
    const listing = await listDirectory(a.host, relayPeer)
    assert.equal(listing.records.length, 3)
    assert.equal(listing.rejected, 0)
  })

  await t.test('a listing of `limit` records is a random sample of that many; a bad limit is refused, the relay keeps serving', async () => {
    const everyone = new Set(nodes.map(node => node.identity.nodeID))
    const seen = new Set<string>()
    for (let i = 0; i < 20; i++) {
      const sample = await listDirectory(a.host, relay.peerId, { limit: 2 })
      assert.equal(sample.records.length, 2)
      assert.equal(sample.rejected, 0)
      assert.equal(new Set(sample.records.map(record => record.nodeID)).size, 2, 'no record twice')
      for (const record of sample.records) {
        assert.ok(everyone.has(record.nodeID))
        seen.add(record.nodeID)
      }
    }
    assert.equal(seen.size, 3, 'every node turns up in some sample')
    assert.equal((await listDirectory(a.host, relay.peerId, { limit: 10 })).records.length, 3, 'a limit above the directory size lists everyone')
    for (const limit of [0, -1, 1.5, 'all', 1_000_000]) {
      const stream = await openStream(a.host, relay.peerId, DIRECTORY_PROTOCOL)
      const frames = openFrames(stream, { maxFrameBytes: 1024 * 1024 })
      await frames.lp.write(new TextEncoder().encode(JSON.stringify({ type: 'list', limit })))
      await assert.rejects(readMessage(frames, z.unknown(), { timeoutMs: 5_000 }), `limit ${JSON.stringify(limit)} is refused`)
      stream.abort(new Error('test done'))
    }
    assert.equal((await listDirectory(a.host, relay.peerId)).records.length, 3)
  })

  await t.test('after a relay restart (same port, same seed, empty directory) the nodes find each other again', async () => {
    const oldPeerId = relay.peerId
    const lost = new Map(nodes.map(node => [node, new Set<string>()]))
    for (const node of nodes) node.wan.on('peer:lost', (nodeID) => { lost.get(node)?.add(nodeID) })
    await relay.stop()
    await waitFor(() => nodes.every(node => !node.wan.relayConnected), { what: 'every node to notice the relay is gone' })
    // Their connections to each other ran through the relay, so each has lost the other two.
    await waitFor(() => nodes.every(node => lost.get(node)?.size === 2 && node.wan.peers().length === 0), { what: 'every node to lose the other two' })
    relay = await startRelay({ port: relayPort, seed: relaySeed, log })
    assert.ok(relay.peerId.equals(oldPeerId))
    assert.equal(relay.directory.list().length, 0)
    await waitFor(allMet, { what: 'every node to re-register and reconnect to the other two' })
  })
})

await test('through a relay with finite limits: connections are limited, our protocols still run and reuse them, and a cut answer is an error', async (t: TestContext) => {
  const relay = await startRelay({ port: 0, log, limits: { dataBytes: 256n * 1024n, durationMs: 60_000 } })
  t.after(async () => { await relay.stop() })
  const [x, y] = await Promise.all([0, 1].map(async () => {
    const host = await createPeerHost(identityFromSeed(generateSeed()), { listen: [], relayUrl: relay.url, log })
    t.after(async () => { await host.stop() })
    await host.dial(relayMultiaddrFromUrl(relay.url, relay.peerId))
    return host
  }))
  await serveBulk(y)
  await waitFor(() => y.getMultiaddrs().some(ma => ma.toString().includes('/p2p-circuit')), { what: 'a reservation at the relay' })
  const circuit = y.getMultiaddrs().find(ma => ma.toString().includes('/p2p-circuit'))
  assert.ok(circuit != null)
  await x.dial(circuit)
  assert.ok(relayedOnly(x, y.peerId))
  assert.ok(x.getConnections(y.peerId).every(connection => connection.limits != null), 'the relay sets limits')

  assert.deepEqual(await fetchBulk(x, y.peerId, 2), { chunks: 2, bytes: 2 * BULK_CHUNK_BYTES })
  assert.deepEqual(await fetchBulk(x, y.peerId, 2), { chunks: 2, bytes: 2 * BULK_CHUNK_BYTES })
  assert.equal(x.getConnections(y.peerId).length, 1, 'both streams used the one limited connection')
  // 1 MiB does not fit in what is left of 256 KiB: the relay resets the connection, and the reader must not take the
  // end of the stream for the end of the answer.
  await assert.rejects(fetchBulk(x, y.peerId, BULK_CHUNKS))
})
