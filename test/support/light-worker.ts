// A child process hosting some of a `LightCluster`'s network-layer nodes (test/support/light-cluster.ts), driven by
// IPC: many nodes in one process share one core, so a cluster of 100 spreads them over several processes.
import { readFileSync } from 'node:fs'
import { setTimeout as delay } from 'node:timers/promises'
import type { PeerNetworkOptions } from '../../src/network/index.ts'
import { nodeIDToPeerId } from '../../src/network/host/peer-ids.ts'
import { startLightNode, type LightNode } from './light-network.ts'

/** Commands and their answers (see `LightCluster`). */
export type WorkerRequest =
  | { op: 'start', count: number, relayUrls: string[], network: PeerNetworkOptions, batch: number, pace?: { firstMs: number, everyMs: number } }
  | { op: 'stats', modelID?: string }
  | { op: 'serve', index: number, modelID: string | null }
  | { op: 'ask', index: number, modelID: string, content: string }
  | { op: 'connectedTo', index: number, nodeID: string }
  | { op: 'io' }
  | { op: 'stop' }

/** One node as the driver sees it. */
export interface NodeStats {
  nodeID: string
  /** Open connections now. */
  connections: number
  /** The most open connections seen, sampled every `SAMPLE_MS` since the node started. */
  highestConnections: number
  /** Peers in its table (connected, record verified). */
  connectedPeers: number
  /** Peers it lists: connected, and known by their advert. */
  knownPeers: number
  /** Peers its router would send a request for the asked model to (0 when no model was asked). */
  candidates: number
  /** Whether a WAN client holds a connection to a relay. */
  relayConnected: boolean
  /** Whether it is still catching up on the adverts from before it joined, its first pull included (`PeerNetwork.joining`). */
  joining: boolean
  /** How long ago an advert it holds last changed (`PeerNetwork.advertsChangedAt`), in ms. */
  advertsQuietMs: number
}

const SAMPLE_MS = 100

const nodes: LightNode[] = []
const highest: number[] = []
let sampler: NodeJS.Timeout | null = null

function openConnections (node: LightNode): number {
  return node.network.host.getConnections().filter(connection => connection.status === 'open').length
}

function sample (): void {
  nodes.forEach((node, i) => { highest[i] = Math.max(highest[i] ?? 0, openConnections(node)) })
}

/** Bytes written and write calls of this process (its nodes' sockets and the IPC answers), and its CPU time in ms. */
function io (): { bytes: number, writes: number, cpuMs: number } {
  const text = readFileSync('/proc/self/io', 'utf8')
  const field = (name: string): number => Number(new RegExp(`^${name}: (\\d+)`, 'm').exec(text)?.[1] ?? 0)
  const cpu = process.cpuUsage()
  return { bytes: field('wchar'), writes: field('syscw'), cpuMs: (cpu.user + cpu.system) / 1000 }
}

async function handle (request: WorkerRequest): Promise<unknown> {
  switch (request.op) {
    case 'start': {
      sampler ??= setInterval(sample, SAMPLE_MS)
      const begun = performance.now()
      for (let i = 0; i < request.count; i += request.batch) {
        // Paced: batch k starts no sooner than firstMs + k × everyMs after the request came.
        if (request.pace != null) await delay(Math.max(0, begun + request.pace.firstMs + (i / request.batch) * request.pace.everyMs - performance.now()))
        const started = await Promise.all(Array.from({ length: Math.min(request.batch, request.count - i) }, async () =>
          await startLightNode({ relayUrls: request.relayUrls, network: request.network })))
        nodes.push(...started)
      }
      return nodes.map(node => node.nodeID)
    }
    case 'stats':
      sample()
      return nodes.map((node, i): NodeStats => {
        const peers = node.network.peers()
        return {
          nodeID: node.nodeID,
          connections: openConnections(node),
          highestConnections: highest[i] ?? 0,
          connectedPeers: peers.filter(peer => peer.connected).length,
          knownPeers: peers.length,
          candidates: request.modelID == null ? 0 : node.router.candidates(request.modelID).length,
          relayConnected: node.network.relayConnected,
          joining: node.network.joining,
          advertsQuietMs: Date.now() - node.network.advertsChangedAt
        }
      })
    case 'serve':
      nodes[request.index].serve(request.modelID)
      return null
    case 'ask':
      return await nodes[request.index].ask(request.modelID, request.content)
    case 'connectedTo':
      return nodes[request.index].network.host.getConnections(nodeIDToPeerId(request.nodeID)).length > 0
    case 'io':
      return io()
    case 'stop':
      if (sampler != null) clearInterval(sampler)
      await Promise.all(nodes.map(async node => { await node.stop() }))
      return null
  }
}

process.on('message', (message: { id: number, request: WorkerRequest }) => {
  handle(message.request).then(
    (result) => { process.send?.({ id: message.id, result }) },
    (err: unknown) => { process.send?.({ id: message.id, error: err instanceof Error ? `${err.name}: ${err.message}` : String(err) }) }
  )
})
// The driver is gone (it finished, or crashed): nothing left to serve.
process.on('disconnect', () => { process.exit(0) })
