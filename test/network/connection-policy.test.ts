// The connection limit and duplicate connections, in one process: the rule both sides of a doubled
// connection apply alone, and eight nodes held to four connections each, one of which reaches a node it is not
// connected to on demand; and each node's join (its advert syncs) ends. The same at 100 nodes: test/network/scale.test.ts.
import assert from 'node:assert/strict'
import { test } from 'node:test'
import type { Connection } from '@libp2p/interface'
import { duplicateToClose } from '../../src/network/peers/connection-policy.ts'
import type { PeerNetworkOptions } from '../../src/network/index.ts'
import { startLightNode, type LightNode } from '../support/light-network.ts'
import { startTestRelay } from '../support/network.ts'
import { waitFor } from '../support/node.ts'

const A = '12D3KooWAAAA'
const B = '12D3KooWBBBB'

/** The two fields the rule reads, as libp2p's Connection has them. */
function connection (direction: 'inbound' | 'outbound', remote: string): Connection {
  return { direction, remotePeer: { toString: () => remote } } as unknown as Connection
}

test('of two connections between the same nodes, both sides close the same one', () => {
  // A and B dialed each other at once: each side sees its own dial (outbound) and the other's (inbound), in either
  // order; both close the one B (the greater peer id) dialed.
  const aDialed = { atA: connection('outbound', B), atB: connection('inbound', A) }
  const bDialed = { atA: connection('inbound', B), atB: connection('outbound', A) }
  assert.equal(duplicateToClose(A, aDialed.atA, bDialed.atA), bDialed.atA)
  assert.equal(duplicateToClose(A, bDialed.atA, aDialed.atA), bDialed.atA)
  assert.equal(duplicateToClose(B, aDialed.atB, bDialed.atB), bDialed.atB)
  assert.equal(duplicateToClose(B, bDialed.atB, aDialed.atB), bDialed.atB)
  // One side dialed twice: the newer goes, on both sides.
  const older = connection('outbound', B)
  const newer = connection('outbound', B)
  assert.equal(duplicateToClose(A, newer, older), newer)
  assert.equal(duplicateToClose(B, connection('inbound', A), connection('inbound', A)).direction, 'inbound')
})

const LIMIT = 4
const NETWORK: PeerNetworkOptions = {
  maxConnections: LIMIT,
  targetPeers: 2,
  inboundConnectionsPerSecond: 10_000,   // every node is 127.0.0.1 here
  pingIntervalMs: 2_000,
  adverts: { debounceMs: 100, resyncMs: 2_000, pullMs: 5_000 },
  wan: { syncIntervalMs: 2_000, fastSyncMs: 200, minBackoffMs: 100, maxBackoffMs: 1_000, dialTimeoutMs: 5_000, reservationTimeoutMs: 5_000 }
}

test(`eight nodes held to ${LIMIT} connections each: never more, no peer twice, and a node not connected is reached on demand`, { timeout: 180_000 }, async (t) => {
  const relay = await startTestRelay(t)
  const nodes: LightNode[] = []
  let highest = 0
  let doubled = 0
  const sampler = setInterval(() => {
    for (const node of nodes) {
      const open = node.network.host.getConnections().filter(connection => connection.status === 'open')
      highest = Math.max(highest, open.length)
      const peers = new Set(open.filter(connection => connection.direct).map(connection => connection.remotePeer.toString()))
      if (peers.size < open.filter(connection => connection.direct).length) doubled++
    }
  }, 20)
  t.after(async () => {
    clearInterval(sampler)
    await Promise.all(nodes.map(async node => { await node.stop() }))
  })
  nodes.push(...await Promise.all(Array.from({ length: 8 }, async () => await startLightNode({ relayUrls: [relay.url], network: NETWORK }))))
  // The join's advert syncs (the first, resyncs 2, 6, 14 and 30 s after it, and the first pull 5 s later) are to come.
  assert.ok(nodes.every(node => node.network.joining))
  await waitFor(() => nodes.every(node => node.network.peers().filter(peer => peer.connected).length > 0 &&
    nodes.every(other => other === node || node.network.peers().some(peer => peer.nodeID === other.nodeID))), { timeoutMs: 90_000, what: 'every node to have a peer and know every other' })

  const server = nodes[7]
  server.serve('on-demand-model')
  const asker = await waitFor(() => nodes.find(node => node !== server && node.router.candidates('on-demand-model').length > 0 &&
    node.network.host.getConnections(server.network.host.peerId).length === 0), { timeoutMs: 60_000, what: 'a node that hears of the model without being connected to its server' })
  const { text, servedBy } = await asker.ask('on-demand-model', 'hello')
  assert.equal(servedBy, `peer:${server.nodeID}`)
  assert.equal(text, `served by ${server.nodeID.slice(0, 8)}: hello`)
  assert.ok(asker.network.host.getConnections(server.network.host.peerId).length > 0, 'connected on demand')

  assert.ok(highest <= LIMIT, `a node held ${highest} connections, over the limit of ${LIMIT}`)
  assert.ok(highest > 1, 'the nodes did connect to each other')
  // A doubled connection lives at most until the other side's copy opens: seen now and then, never for long.
  const now = nodes.map(node => node.network.host.getConnections().filter(connection => connection.direct).map(connection => connection.remotePeer.toString()))
  assert.ok(now.every(peers => new Set(peers).size === peers.length), 'no node holds two direct connections to one peer')
  t.diagnostic(`highest ${highest}; samples with a doubled connection: ${doubled}`)
  await waitFor(() => nodes.every(node => !node.network.joining), { timeoutMs: 120_000, what: 'every node to finish the advert syncs of its join, its first pull included' })
})
