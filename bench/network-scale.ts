// `npm run bench:network-scale [-- N...]`: N network-layer nodes (test/support/light-network.ts: a real PeerNetwork
// each, a stand-in engine behind the real infer protocol and router) on loopback in this process, one relay, for each
// N and each design: "bounded" (issue 15: at most 50 connections, 8 dialed, adverts by gossip) and "full mesh" (every
// node dials every node the relay lists, as before issue 15). Prints one JSON line per run; method in bench/README.md.
import { readFileSync } from 'node:fs'
import { setTimeout as delay } from 'node:timers/promises'
import { startRelay } from '../src/network/relay.ts'
import type { PeerNetworkOptions } from '../src/network/index.ts'
import { startLightNode, type LightNode } from '../test/support/light-network.ts'

const sizes = process.argv.slice(2).map(Number).filter(n => n > 1)
const designs = (process.env.BENCH_DESIGNS ?? 'bounded,full-mesh').split(',')
const IDLE_MS = Number(process.env.BENCH_IDLE_MS ?? 60_000)

const COMMON: PeerNetworkOptions = {
  inboundConnectionsPerSecond: 100_000,   // every node is 127.0.0.1 here
  adverts: { debounceMs: 200 },
  wan: { syncIntervalMs: 30_000, fastSyncMs: 2_000, minBackoffMs: 1_000, maxBackoffMs: 10_000, dialTimeoutMs: 30_000, reservationTimeoutMs: 10_000 }
}
const DESIGNS: Record<string, PeerNetworkOptions> = {
  bounded: { ...COMMON },
  'full-mesh': { ...COMMON, maxConnections: 100_000, targetPeers: 100_000 }
}

/** Bytes written and write calls of this whole process (every node's sockets; logs are silent). */
function io (): { bytes: number, writes: number } {
  const text = readFileSync('/proc/self/io', 'utf8')
  const field = (name: string): number => Number(new RegExp(`^${name}: (\\d+)`, 'm').exec(text)?.[1] ?? 0)
  return { bytes: field('wchar'), writes: field('syscw') }
}

async function until (check: () => boolean, timeoutMs: number): Promise<number | null> {
  const start = performance.now()
  while (performance.now() - start < timeoutMs) {
    if (check()) return performance.now() - start
    await delay(20)
  }
  return null
}

async function run (n: number, design: string): Promise<Record<string, unknown>> {
  const relay = await startRelay({ port: 0 })
  const nodes: LightNode[] = []
  try {
    const started = performance.now()
    for (let i = 0; i < n; i += 10) {
      nodes.push(...await Promise.all(Array.from({ length: Math.min(10, n - i) }, async () => await startLightNode({ relayUrls: [relay.url], network: DESIGNS[design] }))))
    }
    const joinedMs = await until(() => nodes.every(node => node.network.peers().length >= n - 1), 600_000)
    const setupS = (performance.now() - started) / 1000
    await delay(10_000)   // let the first syncs and gossip settle
    const before = io()
    await delay(IDLE_MS)
    const after = io()
    const conns = nodes.map(node => node.network.host.getConnections().length)

    const server = nodes[n - 1]
    server.serve('bench-one-node-model')
    const advertMs = await until(() => nodes.filter(node => node !== server && node.router.candidates('bench-one-node-model').length > 0).length >= Math.ceil(0.95 * (n - 1)), 120_000)
    const asker = nodes.find(node => node !== server && node.network.host.getConnections(server.network.host.peerId).length === 0) ?? nodes[0]
    const askerConnected = asker.network.host.getConnections(server.network.host.peerId).length > 0
    const askStart = performance.now()
    const answer = await asker.ask('bench-one-node-model', 'hi')
    const askMs = performance.now() - askStart
    return {
      design,
      n,
      setupS: Math.round(setupS),
      allKnownAfterS: joinedMs == null ? null : Math.round(joinedMs / 1000),
      connectionsPerNode: { mean: Math.round(conns.reduce((a, b) => a + b, 0) / n * 10) / 10, max: Math.max(...conns) },
      idlePerNodePerMinute: {
        kB: Math.round((after.bytes - before.bytes) / n / (IDLE_MS / 60_000) / 1024 * 10) / 10,
        writes: Math.round((after.writes - before.writes) / n / (IDLE_MS / 60_000))
      },
      advertTo95PercentMs: advertMs == null ? null : Math.round(advertMs),
      placeRequestMs: Math.round(askMs),
      askerWasConnected: askerConnected,
      servedBy: answer.servedBy === `peer:${server.nodeID}`,
      relay: { connections: relay.connections(), directory: relay.directory.size }
    }
  } finally {
    await Promise.all(nodes.map(async node => { await node.stop() }))
    await relay.stop()
  }
}

for (const n of sizes.length > 0 ? sizes : [10, 50, 100, 200]) {
  for (const design of designs) {
    console.log(JSON.stringify(await run(n, design)))
  }
}
process.exit(0)
