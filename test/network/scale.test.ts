// A network of 100 nodes on loopback, the network layer only (light nodes: a real PeerNetwork each, a
// stand-in engine behind the real infer protocol and router), spread over four processes: connections per node never
// above the limit (sampled every 100 ms in each process), idle traffic per node no faster than O(log N) from 25 nodes
// to 100, a new model's advert reaches 95 % of the nodes by gossip, and a request for a model exactly one node serves
// is placed on it, connected on demand, and answered. How fast the advert spreads is measured by
// bench/network-scale.ts, not asserted here.
import assert from 'node:assert/strict'
import { test, type TestContext } from 'node:test'
import { setTimeout as delay } from 'node:timers/promises'
import { ADVERT_PULL_WINDOW_MARGIN_MS } from '../../src/network/adverts/advert-gossip.ts'
import type { PeerNetworkOptions } from '../../src/network/index.ts'
import { startRelay } from '../../src/network/relay/relay.ts'
import { LightCluster } from '../support/light-cluster.ts'
import { waitFor } from '../support/node.ts'

const N = 100
/** The network the idle traffic of the one of N is compared with: a quarter the size, as 50 is of 200. */
const SMALL_N = N / 4
const MAX_CONNECTIONS = 10
const MODEL = 'one-node-model'
/** How long the idle traffic is counted, the same at both sizes. A count, not a duration asserted. */
const IDLE_WINDOW_MS = 30_000

/**
 * A limit well under N, so that most nodes are known by advert only; syncs and retries suited to 100 nodes on 2 cores;
 * the join's resyncs at 2, 6, 14 and 30 s after the first sync and a pull every 30 s after them, so that the network is
 * soon idle. The first pull still catches up on the join (its window reaches back to it: after N nodes started at once
 * it brings all N adverts again) and ends `joining`; the later ones, in the idle window, bring what changed since.
 */
const SCALE_NETWORK: PeerNetworkOptions = {
  maxConnections: MAX_CONNECTIONS,
  targetPeers: 4,
  inboundConnectionsPerSecond: 100_000,   // every node is 127.0.0.1 here
  adverts: { debounceMs: 200, resyncMs: 2_000, pullMs: 30_000 },
  wan: { syncIntervalMs: 10_000, fastSyncMs: 1_000, minBackoffMs: 500, maxBackoffMs: 5_000, dialTimeoutMs: 30_000, reservationTimeoutMs: 20_000 }
}

/** Starts `n` nodes behind a relay of their own (stopped when the test ends) and waits until they have joined and are
 *  idle: every node holds a relay connection and a peer, 95 % of them know 95 % of the others, every node has caught
 *  up, and on 95 % of them no advert has changed for as long as a pull reaches back. */
async function joinedNetwork (t: TestContext, n: number): Promise<LightCluster> {
  const relay = await startRelay({ port: 0, inboundConnectionsPerSecond: 100_000 })
  t.after(async () => { await relay.stop() })
  const cluster = await LightCluster.start({ relayUrls: [relay.url], nodes: n, workers: Math.ceil(n / 25), network: SCALE_NETWORK })
  t.after(async () => { await cluster.stop() })
  assert.equal(cluster.size, n)
  await waitFor(async () => (await cluster.stats()).every(node => node.relayConnected && node.connectedPeers > 0), { timeoutMs: 300_000, intervalMs: 500, what: `every one of ${n} nodes to hold a relay connection and a peer` })
  // Bounded, yet everybody knows (nearly) everybody: by the adverts of those it is not connected to.
  await waitFor(async () => (await cluster.stats()).filter(node => node.knownPeers >= Math.ceil(0.95 * (n - 1))).length >= Math.ceil(0.95 * n), {
    timeoutMs: 300_000, intervalMs: 500, what: `95 % of ${n} nodes to know 95 % of the others`
  })
  await waitFor(async () => (await cluster.stats()).every(node => !node.joining), { timeoutMs: 300_000, intervalMs: 500, what: `every one of ${n} nodes to finish its join` })
  // Idle: no advert changed within what a pull reaches back to, on 95 % of the nodes (as above: on a starved machine a
  // few nodes keep re-learning adverts of peers whose renewals came late). Until then a pull still brings the adverts
  // of the join's last nodes, and a larger network's join ends later: its idle window would count part of the join.
  const pullReachMs = (SCALE_NETWORK.adverts?.pullMs ?? 0) + ADVERT_PULL_WINDOW_MARGIN_MS
  await waitFor(async () => (await cluster.stats()).filter(node => node.advertsQuietMs > pullReachMs).length >= Math.ceil(0.95 * n), {
    timeoutMs: 300_000, intervalMs: 1_000, what: `no advert to change on 95 % of ${n} nodes for ${pullReachMs / 1000} s`
  })
  return cluster
}

/** Bytes the nodes write in `IDLE_WINDOW_MS` (their sockets, and a few IPC answers), per node, in kB. */
async function idleKBPerNode (cluster: LightCluster): Promise<number> {
  const before = await cluster.io()
  await delay(IDLE_WINDOW_MS)
  const after = await cluster.io()
  return (after.bytes - before.bytes) / cluster.size / 1024
}

test(`${SMALL_N}, then ${N} nodes: connections per node never above the limit; idle traffic per node no faster than log N; an advert reaches 95 %; a model one node serves is reached on demand and answers`, { timeout: 900_000 }, async (t) => {
  const small = await joinedNetwork(t, SMALL_N)
  const smallKB = await idleKBPerNode(small)
  await small.stop()

  const cluster = await joinedNetwork(t, N)
  const kB = await idleKBPerNode(cluster)
  // O(log N): from a quarter the size to N, at most log N / log (N / 4) as much per node. A full mesh grows about 4×.
  const bound = smallKB * Math.log(N) / Math.log(SMALL_N)
  t.diagnostic(`idle traffic per node in ${IDLE_WINDOW_MS / 1000} s: ${smallKB.toFixed(1)} kB at ${SMALL_N} nodes, ${kB.toFixed(1)} kB at ${N} (${(kB / smallKB).toFixed(2)}×; log N allows ${bound.toFixed(1)} kB)`)
  assert.ok(smallKB > 0, 'the nodes of the small network wrote nothing while idle: nothing was counted')
  assert.ok(kB <= bound, `idle traffic per node grew from ${smallKB.toFixed(1)} kB at ${SMALL_N} nodes to ${kB.toFixed(1)} kB at ${N}, more than log N allows (${bound.toFixed(1)} kB)`)

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
