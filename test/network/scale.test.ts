// A network of 100 nodes on loopback (issue 15), the network layer only (light nodes: a real PeerNetwork each, a
// stand-in engine behind the real infer protocol and router), spread over four processes: connections per node never
// above the limit (sampled every 100 ms in each process), a new model's advert reaches 95 % of the nodes by gossip,
// and a request for a model exactly one node serves is placed on it, connected on demand, and answered. How fast the
// advert spreads is measured by bench/network-scale.ts, not asserted here.
import assert from 'node:assert/strict'
import { test } from 'node:test'
import type { PeerNetworkOptions } from '../../src/network/index.ts'
import { startRelay } from '../../src/network/relay.ts'
import { LightCluster } from '../support/light-cluster.ts'
import { waitFor } from '../support/node.ts'

const N = 100
const MAX_CONNECTIONS = 10
const MODEL = 'one-node-model'

/** A limit well under N, so that most nodes are known by advert only; syncs and retries suited to 100 nodes on 2 cores. */
const SCALE_NETWORK: PeerNetworkOptions = {
  maxConnections: MAX_CONNECTIONS,
  targetPeers: 4,
  inboundConnectionsPerSecond: 100_000,   // every node is 127.0.0.1 here
  adverts: { debounceMs: 200, resyncMs: 10_000 },
  wan: { syncIntervalMs: 10_000, fastSyncMs: 1_000, minBackoffMs: 500, maxBackoffMs: 5_000, dialTimeoutMs: 30_000, reservationTimeoutMs: 20_000 }
}

test(`${N} nodes: connections per node never above the limit; an advert reaches 95 %; a model one node serves is reached on demand and answers`, { timeout: 600_000 }, async (t) => {
  const relay = await startRelay({ port: 0, inboundConnectionsPerSecond: 100_000 })
  t.after(async () => { await relay.stop() })
  const cluster = await LightCluster.start({ relayUrls: [relay.url], nodes: N, workers: 4, network: SCALE_NETWORK })
  t.after(async () => { await cluster.stop() })
  assert.equal(cluster.size, N)

  await waitFor(async () => (await cluster.stats()).every(node => node.relayConnected && node.connectedPeers > 0), { timeoutMs: 300_000, intervalMs: 500, what: 'every node to hold a relay connection and a peer' })
  // Bounded, yet everybody knows (nearly) everybody: by the adverts of those it is not connected to.
  await waitFor(async () => (await cluster.stats()).filter(node => node.knownPeers >= Math.ceil(0.95 * (N - 1))).length >= Math.ceil(0.95 * N), {
    timeoutMs: 300_000, intervalMs: 500, what: '95 % of the nodes to know 95 % of the others'
  })

  const server = N - 1
  const serverID = cluster.nodeIDs[server]
  await cluster.serve(server, MODEL)
  const reached = await waitFor(async () => {
    const stats = await cluster.stats(MODEL)
    const hearing = stats.filter((node, i) => i !== server && node.candidates > 0).length
    return hearing >= Math.ceil(0.95 * (N - 1)) ? hearing : false
  }, { timeoutMs: 300_000, intervalMs: 250, what: 'the advert to reach 95 % of the nodes' })
  t.diagnostic(`the advert reached ${reached} of ${N - 1} nodes`)

  // A node that knows the server by its advert only: its request dials the server on demand.
  const stats = await cluster.stats(MODEL)
  let asker = -1
  for (let i = 0; i < N && asker < 0; i++) {
    if (i !== server && stats[i].candidates > 0 && !(await cluster.connectedTo(i, serverID))) asker = i
  }
  assert.ok(asker >= 0, 'a node that hears of the model without being connected to its server')
  const { text, servedBy } = await cluster.ask(asker, MODEL, 'hello')
  assert.equal(servedBy, `peer:${serverID}`)
  assert.equal(text, `served by ${serverID.slice(0, 8)}: hello`)
  assert.ok(await cluster.connectedTo(asker, serverID), 'the asker connected to the server to place the request')

  const final = await cluster.stats()
  const highest = Math.max(...final.map(node => node.highestConnections))
  t.diagnostic(`connections per node now: min ${Math.min(...final.map(n => n.connections))}, max ${Math.max(...final.map(n => n.connections))}; highest sampled ${highest}; peers known per node: min ${Math.min(...final.map(n => n.knownPeers))}`)
  assert.ok(highest <= MAX_CONNECTIONS, `a node held ${highest} connections, over the limit of ${MAX_CONNECTIONS}`)
  assert.ok(final.every(node => node.connections <= MAX_CONNECTIONS))
})
