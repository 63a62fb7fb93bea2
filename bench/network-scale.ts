// `npm run bench:network-scale [-- N...]`: N network-layer nodes (test/support/light-network.ts: a real PeerNetwork
// each, a stand-in engine behind the real infer protocol and router) on loopback, spread over child processes of 25
// nodes each (test/support/light-cluster.ts), and one relay in this process, for each N and each design: "bounded"
// (at most 50 connections, 8 dialed, adverts by gossip) and "full mesh" (every node dials every node the
// relay lists, as before the bounded design). Prints one JSON line per run; method and results in bench/README.md.
import { readFileSync } from 'node:fs'
import { loadavg } from 'node:os'
import { setTimeout as delay } from 'node:timers/promises'
import { startRelay } from '../src/network/relay/relay.ts'
import type { PeerNetworkOptions } from '../src/network/index.ts'
import { LightCluster, type NodeStats } from '../test/support/light-cluster.ts'

const sizes = process.argv.slice(2).map(Number).filter(n => n > 1)
const designs = (process.env.BENCH_DESIGNS ?? 'bounded,full-mesh').split(',')
const IDLE_MS = Number(process.env.BENCH_IDLE_MS ?? 60_000)
const NODES_PER_WORKER = Number(process.env.BENCH_NODES_PER_WORKER ?? 25)
/** Nodes each worker starts at once. One: 200 nodes starting 40 at a time on 2 cores (8 workers × 5) overloaded the
 *  machine into timeouts, reconnections and re-published adverts that kept it overloaded: a start no real network has. */
const START_BATCH = Number(process.env.BENCH_START_BATCH ?? 1)
/** One node started every this many ms across the cluster (0: each worker starts its next as soon as the last is up).
 *  On 2 cores, 200 nodes started back to back never settle (bench/HISTORY.md); paced, the start costs what one join does. */
const START_EVERY_MS = Number(process.env.BENCH_START_EVERY_MS ?? 0)
/** How long to wait for every node to know every other one before measuring anyway. */
const JOIN_MS = Number(process.env.BENCH_JOIN_S ?? 600) * 1000

const COMMON: PeerNetworkOptions = {
  inboundConnectionsPerSecond: 100_000,   // every node is 127.0.0.1 here
  adverts: { debounceMs: 200, resyncMs: 5_000 },   // re-syncs at 5, 10, 20 and 40 s after joining: over before the idle window
  wan: { syncIntervalMs: 30_000, fastSyncMs: 2_000, minBackoffMs: 1_000, maxBackoffMs: 10_000, dialTimeoutMs: 30_000, reservationTimeoutMs: 20_000 }
}
const DESIGNS: Record<string, PeerNetworkOptions> = {
  bounded: { ...COMMON },
  'full-mesh': { ...COMMON, maxConnections: 100_000, targetPeers: 100_000 }
}

/** Bytes written and write calls of this process: the relay's sockets (and a few IPC messages); and its CPU time in ms. */
function ownIo (): { bytes: number, writes: number, cpuMs: number } {
  const text = readFileSync('/proc/self/io', 'utf8')
  const field = (name: string): number => Number(new RegExp(`^${name}: (\\d+)`, 'm').exec(text)?.[1] ?? 0)
  const cpu = process.cpuUsage()
  return { bytes: field('wchar'), writes: field('syscw'), cpuMs: (cpu.user + cpu.system) / 1000 }
}

async function until (check: () => Promise<boolean>, timeoutMs: number, intervalMs = 100): Promise<number | null> {
  const start = performance.now()
  while (performance.now() - start < timeoutMs) {
    if (await check()) return performance.now() - start
    await delay(intervalMs)
  }
  return null
}

const round = (x: number, digits = 1): number => Math.round(x * 10 ** digits) / 10 ** digits
const mean = (xs: number[]): number => xs.reduce((a, b) => a + b, 0) / xs.length

async function run (n: number, design: string): Promise<Record<string, unknown>> {
  const relay = await startRelay({ port: 0, inboundConnectionsPerSecond: 100_000 })
  let cluster: LightCluster | null = null
  try {
    const started = performance.now()
    cluster = await LightCluster.start({ relayUrls: [relay.url], nodes: n, workers: Math.ceil(n / NODES_PER_WORKER), batch: START_BATCH, startEveryMs: START_EVERY_MS > 0 ? START_EVERY_MS : undefined, network: DESIGNS[design] })
    const allStarted = performance.now()
    const nodes = cluster
    let stats: NodeStats[] = []
    const joinedMs = await until(async () => {
      stats = await nodes.stats()
      return stats.every(node => node.knownPeers >= n - 1)
    }, JOIN_MS, 500)
    const setupS = (performance.now() - started) / 1000
    const startS = (allStarted - started) / 1000
    // Let the last re-syncs and gossip settle: at least 10 s, and 90 s from the last node's start.
    await delay(Math.max(10_000, 90_000 - (performance.now() - allStarted)))
    const load = loadavg()[0]
    const [before, relayBefore] = [await nodes.io(), ownIo()]
    await delay(IDLE_MS)
    const [after, relayAfter] = [await nodes.io(), ownIo()]
    stats = await nodes.stats()
    const conns = stats.map(node => node.connections)
    const perNodeMinute = (bytes: number, count: number): number => bytes / count / (IDLE_MS / 60_000)

    const server = n - 1
    const serverID = nodes.nodeIDs[server]
    const model = `bench-one-node-model-${n}`
    await nodes.serve(server, model)
    const advertMs = await until(async () => (await nodes.stats(model)).filter((node, i) => i !== server && node.candidates > 0).length >= Math.ceil(0.95 * (n - 1)), 120_000, 50)
    const byModel = await nodes.stats(model)
    let asker = -1
    for (let i = 0; i < n && asker < 0; i++) if (i !== server && byModel[i].candidates > 0 && !(await nodes.connectedTo(i, serverID))) asker = i
    const askerWasConnected = asker < 0
    if (asker < 0) asker = 0
    const askStart = performance.now()
    // A failed request is a result too (say, a stream not opened within its 10 s on an overloaded machine).
    const answer = await nodes.ask(asker, model, 'hi').catch((err: unknown) => ({ servedBy: err instanceof Error ? err.message : String(err), text: '' }))
    const askMs = performance.now() - askStart
    const final = await nodes.stats()
    return {
      design,
      n,
      loadAverage1m: round(load, 2),
      startS: Math.round(startS),
      setupS: Math.round(setupS),
      allKnownAfterS: joinedMs == null ? null : Math.round(joinedMs / 1000),
      // Before the idle window: how many nodes knew every other one, and how many others a node knew on average.
      knowingAll: stats.filter(node => node.knownPeers >= n - 1).length,
      knownPeersMean: round(mean(stats.map(node => node.knownPeers))),
      connectionsPerNode: { mean: round(mean(conns)), max: Math.max(...conns), highestSampled: Math.max(...final.map(node => node.highestConnections)) },
      idlePerNodePerMinute: {
        kB: round(perNodeMinute(after.bytes - before.bytes, n) / 1024),
        writes: Math.round(perNodeMinute(after.writes - before.writes, n)),
        cpuMs: Math.round(perNodeMinute(after.cpuMs - before.cpuMs, n))
      },
      advertTo95PercentMs: advertMs == null ? null : Math.round(advertMs),
      placeRequestMs: Math.round(askMs),
      askerWasConnected,
      servedBy: answer.servedBy === `peer:${serverID}` ? true : answer.servedBy,
      relay: {
        connections: relay.connections(),
        directory: relay.directory.size,
        idleKBPerMinute: round(perNodeMinute(relayAfter.bytes - relayBefore.bytes, 1) / 1024),
        idleCpuMsPerMinute: Math.round(perNodeMinute(relayAfter.cpuMs - relayBefore.cpuMs, 1))
      }
    }
  } finally {
    await cluster?.stop()
    await relay.stop()
  }
}

for (const n of sizes.length > 0 ? sizes : [10, 50, 100, 200]) {
  for (const design of designs) {
    console.log(JSON.stringify(await run(n, design)))
  }
}
process.exit(0)
