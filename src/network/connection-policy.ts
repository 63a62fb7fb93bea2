import type { Connection, PeerId } from '@libp2p/interface'
import { peerIdFromString } from '@libp2p/peer-id'
import type { Logger } from 'pino'
import type { PeerHost } from './libp2p-node.ts'
import { nodeIDToPeerId } from './peer-ids.ts'

/** Connections a node holds at most, by default (libp2p's connection manager enforces it). */
export const DEFAULT_MAX_CONNECTIONS = 50
/** Peers a node connects to of its own accord, by default (at most half the limit): the rest come in, or on demand. */
export const DEFAULT_TARGET_PEERS = 8

/** Tags on the peer store that libp2p's connection pruner sums: the lowest total is closed first. */
const TAGS = {
  relay: { name: 'meshnode-relay', value: 100 },
  ptn: { name: 'meshnode-ptn', value: 80 },
  /** A peer this node opened a stream to (a request, a transfer, a message): kept a while after. */
  inUse: { name: 'meshnode-in-use', value: 50, ttlMs: 10 * 60_000 }
} as const

export interface ConnectionPolicyOptions {
  /** Connections held at most. @default DEFAULT_MAX_CONNECTIONS */
  maxConnections?: number
  /** Peers connected to of this node's own accord (found through a relay's listing). @default DEFAULT_TARGET_PEERS */
  targetPeers?: number
}

/**
 * Which connections a node keeps (issue 15): at most `maxConnections` (libp2p's connection manager refuses inbound
 * ones beyond it and prunes the least valued), valued by tags in the peer store: relays and PTN peers first, then the
 * peers this node is using; everyone else is reached on demand when a request needs them. This node dials only
 * `targetPeers` nodes of its own accord.
 */
export class ConnectionPolicy {
  readonly maxConnections: number
  readonly targetPeers: number
  readonly #log: Logger
  #host: PeerHost | null = null
  readonly #ptnTagged = new Set<string>()
  /** Relays' peer ids: not counted among the peers dialed. */
  readonly #relays = new Set<string>()

  constructor (deps: { log: Logger }, options: ConnectionPolicyOptions = {}) {
    this.#log = deps.log
    this.maxConnections = Math.max(2, options.maxConnections ?? DEFAULT_MAX_CONNECTIONS)
    this.targetPeers = Math.max(1, Math.min(options.targetPeers ?? DEFAULT_TARGET_PEERS, Math.floor(this.maxConnections / 2)))
  }

  attach (host: PeerHost | null): void {
    this.#host?.removeEventListener('connection:open', this.#onOpen)
    this.#host = host
    this.#ptnTagged.clear()
    this.#relays.clear()
    host?.addEventListener('connection:open', this.#onOpen)
  }

  /**
   * Every new connection over the limit closes the least valued idle connection at once. libp2p's own limit is checked
   * before inbound upgrades finish, so several at once can pass it; this is what holds the limit.
   */
  readonly #onOpen = (): void => {
    const host = this.#host
    if (host == null) return
    if (host.getConnections().length <= this.maxConnections) return
    this.#leastValued(host).then((victim) => {
      if (victim != null && host.getConnections().length > this.maxConnections) this.#close(victim, 'over the connection limit')
    }).catch((err: unknown) => { this.#log.debug({ err }, 'choosing a connection to close failed') })
  }

  #close (connection: Connection, why: string): void {
    this.#log.debug({ peer: connection.remotePeer.toString(), why }, 'closing a connection')
    connection.abort(new Error(`closed: ${why}`))
  }

  /** How many more nodes to dial of this node's own accord now. */
  dialBudget (): number {
    const host = this.#host
    if (host == null) return 0
    const room = this.maxConnections - 1 - host.getConnections().length
    const peers = host.getPeers().filter(peer => !this.#relays.has(peer.toString())).length
    return Math.max(0, Math.min(room, this.targetPeers - peers))
  }

  /** A relay this node uses (by peer id). */
  relay (peer: string): void {
    this.#relays.add(peer)
    this.#tag(peerIdFromString(peer), TAGS.relay.name, TAGS.relay.value)
  }

  /** A peer that shares a PTN with this node, or no longer does. */
  ptnPeer (nodeID: string, shares: boolean): void {
    if (shares === this.#ptnTagged.has(nodeID)) return
    if (shares) this.#ptnTagged.add(nodeID)
    else this.#ptnTagged.delete(nodeID)
    this.#tag(nodeIDToPeerId(nodeID), TAGS.ptn.name, shares ? TAGS.ptn.value : null)
  }

  /**
   * This node is about to use `nodeID` (open a stream to it): tagged as in use, and when it is not connected and the
   * limit is reached, the least valued idle connection is closed first to make room for it.
   */
  async using (nodeID: string): Promise<void> {
    const host = this.#host
    if (host == null) return
    const peer = nodeIDToPeerId(nodeID)
    this.#tag(peer, TAGS.inUse.name, TAGS.inUse.value, TAGS.inUse.ttlMs)
    if (host.getConnections(peer).length > 0 || host.getConnections().length < this.maxConnections) return
    const victim = await this.#leastValued(host)
    if (victim == null) return
    this.#close(victim, 'making room to reach a peer on demand')
  }

  async #leastValued (host: PeerHost): Promise<Connection | null> {
    let best: { connection: Connection, value: number } | null = null
    for (const connection of host.getConnections()) {
      if (busy(connection)) continue
      const value = await this.#value(host, connection)
      if (best == null || value < best.value) best = { connection, value }
    }
    return best?.connection ?? null
  }

  async #value (host: PeerHost, connection: Connection): Promise<number> {
    try {
      const peer = await host.peerStore.get(connection.remotePeer)
      return [...peer.tags.values()].reduce((sum, tag) => sum + tag.value, 0)
    } catch {
      return 0   // not in the peer store: no tags
    }
  }

  #tag (peer: PeerId, name: string, value: number | null, ttl?: number): void {
    const host = this.#host
    if (host == null) return
    host.peerStore.merge(peer, { tags: { [name]: value == null ? undefined : { value, ttl } } }).catch((err: unknown) => {
      this.#log.debug({ err, peer: peer.toString(), tag: name }, 'tagging a peer failed')
    })
  }
}

/** A connection carrying one of our protocols' streams now (a request, a record fetch): not closed to make room. */
function busy (connection: Connection): boolean {
  return connection.streams.some(stream => stream.protocol?.startsWith('/meshnode/') === true)
}
