// The guard every protocol handler runs behind (src/network/peers/protocol-registry.ts), on a real peer network and a
// stand-in peer on loopback: an exchange is over when its handler returns. A requester that never closes its side of
// the stream has it reset, so the stream does not stay on the node's connection, where it would count the connection
// busy (connection-policy.ts) for as long as it lasts; a requester that half-closes, as ours do, ends it cleanly.
import assert from 'node:assert/strict'
import { test, type TestContext } from 'node:test'
import { multiaddr } from '@multiformats/multiaddr'
import type { Stream } from '@libp2p/interface'
import { peerIdFromIdentity } from '../../src/network/host/libp2p-node.ts'
import { INFER_PROTOCOL, InferFrame, MAX_INFER_RESPONSE_FRAME_BYTES } from '../../src/remote/infer.ts'
import { openFrames, readMessage, writeMessage, type FrameStream } from '../../src/wire/index.ts'
import { startLightNode, type LightNode } from '../support/light-network.ts'
import { startTestRelay } from '../support/network.ts'
import { waitFor } from '../support/node.ts'
import { serveRecord, standInHost, standInRecord, type StandIn } from '../support/stand-in.ts'

/** A light node with WAN on (so that any node but the relay may use its protocols), and a stand-in connected to it. */
async function nodeAndStandIn (t: TestContext): Promise<{ node: LightNode, standIn: StandIn }> {
  const relay = await startTestRelay(t)
  const node = await startLightNode({ relayUrls: [relay.url] })
  t.after(() => node.stop())
  await waitFor(() => node.network.relayConnected, { what: 'WAN on' })
  const standIn = await standInHost(t)
  await serveRecord(standIn, () => standInRecord(standIn.identity))
  const direct = node.network.addresses().filter(a => a.includes('/tcp/') && !a.includes('/ws') && !a.includes('p2p-circuit')).map(a => multiaddr(a))
  await standIn.host.dial(direct)
  await waitFor(() => node.network.peer(standIn.identity.nodeID) != null, { what: 'the stand-in in the node\'s peer table' })
  return { node, standIn }
}

/** Sends one chat request on a new infer stream; closes the stand-in's side after it only if `halfClose`. */
async function ask (standIn: StandIn, node: LightNode, options: { halfClose: boolean }): Promise<{ stream: Stream, frames: FrameStream }> {
  const stream = await standIn.host.dialProtocol(node.network.host.peerId, INFER_PROTOCOL)
  const frames = openFrames(stream, { maxFrameBytes: MAX_INFER_RESPONSE_FRAME_BYTES })
  await writeMessage(frames, { modelID: 'any-model', request: { kind: 'chat', messages: [{ role: 'user', content: 'hi' }], maxTokens: 4 }, ptnID: null })
  if (options.halfClose) await stream.close()
  return { stream, frames }
}

/** Reads answer frames up to the last one; returns its type. */
async function answer (frames: FrameStream): Promise<string> {
  for (;;) {
    const frame = await readMessage(frames, InferFrame, { timeoutMs: 30_000 })
    if (frame.type === 'done' || frame.type === 'error') return frame.type
  }
}

/** The node's infer streams from the stand-in, on every connection to it. */
function inferStreams (node: LightNode, standIn: StandIn): Stream[] {
  return node.network.host.getConnections(peerIdFromIdentity(standIn.identity)).flatMap(connection => connection.streams).filter(stream => stream.protocol === INFER_PROTOCOL)
}

test('a requester that never closes its side of an answered stream: the node resets the stream and keeps the connection', async (t) => {
  const { node, standIn } = await nodeAndStandIn(t)
  const { stream, frames } = await ask(standIn, node, { halfClose: false })
  assert.equal(await answer(frames), 'done')
  assert.equal(stream.writeStatus, 'writable', 'the stand-in has not closed its side')

  await waitFor(() => inferStreams(node, standIn).length === 0, { timeoutMs: 60_000, what: 'the answered stream to leave the node\'s connection' })
  await waitFor(() => stream.status === 'reset', { timeoutMs: 30_000, what: 'the stand-in to see its stream reset' })
  assert.ok(node.network.host.getConnections(peerIdFromIdentity(standIn.identity)).some(connection => connection.status === 'open'), 'only the stream went, not the connection')
  assert.ok(node.network.isKnownPeer(standIn.identity.nodeID), 'nor the peer: keeping a stream open is no offence')
})

test('a requester that half-closes after its request, as ours do: the stream ends cleanly, not by a reset', async (t) => {
  const { node, standIn } = await nodeAndStandIn(t)
  const { stream, frames } = await ask(standIn, node, { halfClose: true })
  assert.equal(await answer(frames), 'done')
  await waitFor(() => stream.status !== 'open', { timeoutMs: 30_000, what: 'the stream to end' })
  assert.equal(stream.status, 'closed')
  await waitFor(() => inferStreams(node, standIn).length === 0, { timeoutMs: 30_000, what: 'the stream to leave the node\'s connection' })
})
