// The peer table is fed by libp2p's connection `rtt` and by the records peers push when they change
// (a version number), never by a heartbeat of our own: a peer's record is fetched once, when it connects.
import assert from 'node:assert/strict'
import { test } from 'node:test'
import { CAPABILITIES_PROTOCOL, createCapabilitiesHandler, pushCapabilities, signCapabilities, type CapabilityRecord } from '../../src/network/peers/capabilities.ts'
import { handleProtocol, nodeIDToPeerId, openStream, peerIdToNodeID } from '../../src/network/host/libp2p-node.ts'
import { FAST_NETWORK, startTestRelay, startWanNode } from '../support/network.ts'
import { waitFor } from '../support/node.ts'
import { directAddrs, standInHost, standInRecord } from '../support/stand-in.ts'

test('a peer\'s record is fetched once, then only pushed; the node pushes its own when it changes; latency is the connection\'s rtt', async (t) => {
  const relay = await startTestRelay(t)
  const node = await startWanNode(t, relay) // FAST_NETWORK: its connection monitor pings every second
  await waitFor(() => node.node.network.relayConnected, { what: 'WAN on at the node' })

  // The peer: a node of other code that counts the fetches of its record and keeps what the node pushes to it.
  const peer = await standInHost(t)
  let version = 1
  let fetches = 0
  const pushed: CapabilityRecord[] = []
  const handler = createCapabilitiesHandler({
    current: () => { fetches++; return signCapabilities(peer.identity, standInRecord(peer.identity, { version })) },
    received: (_nodeID, record) => { pushed.push(record) }
  })
  await handleProtocol(peer.host, CAPABILITIES_PROTOCOL, async (stream, connection) => {
    await handler(stream, { nodeID: peerIdToNodeID(connection.remotePeer) })
  }, { maxInboundStreams: 4 })
  const nodeAddrs = directAddrs(node)
  await peer.host.dial(nodeAddrs)
  await waitFor(() => node.node.network.isKnownPeer(peer.identity.nodeID), { what: 'the peer in the node\'s table' })
  assert.equal(fetches, 1, 'fetched once, on connect')

  // The node's record changes (its agent's name): it pushes the new version; the peer never had to ask.
  const before = Math.max(0, ...pushed.map((record) => record.version))
  assert.equal((await node.api.patch('/v1/app/agent/profile', { name: 'renamed agent' })).status, 200)
  await waitFor(() => pushed.some((record) => record.agent?.name === 'renamed agent'), { what: 'the node to push its changed record' })
  const renamed = pushed.find((record) => record.agent?.name === 'renamed agent')
  assert.ok(renamed != null && renamed.version > before, `version ${renamed?.version} after ${before}`)

  // The peer's changes reach the node as pushes: each newer version replaces the record, with no fetch.
  for (let i = 0; i < 3; i++) {
    version++
    const stream = await openStream(peer.host, nodeIDToPeerId(node.nodeID), CAPABILITIES_PROTOCOL)
    await pushCapabilities(stream, signCapabilities(peer.identity, standInRecord(peer.identity, { version, name: `v${version}` })))
  }
  await waitFor(() => node.node.network.peer(peer.identity.nodeID)?.record.version === version, { what: 'the node to take the pushes' })
  assert.equal(node.node.network.peer(peer.identity.nodeID)?.record.name, `v${version}`)

  // Latency is what libp2p's connection monitor measured on the connection (its pings, every second here).
  const rtts = (): number[] => node.node.network.host.getConnections(nodeIDToPeerId(peer.identity.nodeID))
    .map((connection) => connection.rtt).filter((rtt): rtt is number => rtt != null)
  await waitFor(() => rtts().length > 0, { what: 'the connection monitor to measure the connection' })
  await waitFor(() => node.node.network.peer(peer.identity.nodeID)?.latencyMs === Math.round(Math.min(...rtts())), { what: 'the latency to be the connection\'s rtt' })

  // Seconds have passed, with pings and pushes in both directions: the record was still fetched only once.
  assert.equal(fetches, 1, 'no periodic re-fetch')
})

test('a peer that enters the table by a push, its fetch unanswered, still gets a latency before the connection monitor pings', async (t) => {
  const relay = await startTestRelay(t)
  // The connection monitor pings every ten minutes: a latency within the test comes from the table's own first pings.
  const node = await startWanNode(t, relay, { network: { ...FAST_NETWORK, pingIntervalMs: 600_000 } })
  await waitFor(() => node.node.network.relayConnected, { what: 'WAN on at the node' })

  // The peer never answers the node's fetch of its record (the stream stays open until the test ends): the fetch's
  // ping goes down with it. The peer pushes its record instead, and that is how it enters the node's table.
  const peer = await standInHost(t)
  const { promise: ended, resolve: end } = Promise.withResolvers<void>()
  t.after(() => { end() })
  let fetches = 0
  await handleProtocol(peer.host, CAPABILITIES_PROTOCOL, async () => { fetches++; await ended }, { maxInboundStreams: 4 })
  const nodeAddrs = directAddrs(node)
  await peer.host.dial(nodeAddrs)
  await waitFor(() => fetches > 0, { what: 'the node to ask for the peer\'s record' })
  const stream = await openStream(peer.host, nodeIDToPeerId(node.nodeID), CAPABILITIES_PROTOCOL)
  await pushCapabilities(stream, signCapabilities(peer.identity, standInRecord(peer.identity)))
  await waitFor(() => node.node.network.isKnownPeer(peer.identity.nodeID), { what: 'the pushed peer in the node\'s table' })

  await waitFor(() => typeof node.node.network.peer(peer.identity.nodeID)?.latencyMs === 'number', { what: 'the pushed peer to get a latency' })
  const rtts = node.node.network.host.getConnections(nodeIDToPeerId(peer.identity.nodeID)).map((connection) => connection.rtt)
  assert.ok(rtts.every((rtt) => rtt == null), 'measured by the table\'s ping, not the connection monitor')
})
