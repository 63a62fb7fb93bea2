import type { Connection, PeerId } from '@libp2p/interface'
import { peerIdFromString } from '@libp2p/peer-id'
import type { Logger } from 'pino'
import { ADVERTS_SYNC_PROTOCOL } from '../adverts/adverts.ts'
import { CAPABILITIES_PROTOCOL } from './capabilities.ts'
import type { PeerHost } from '../host/libp2p-node.ts'
import { nodeIDToPeerId } from '../host/peer-ids.ts'

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

/**
 * The network's own upkeep (record fetches and pushes, advert syncs): its streams keep no connection, as they set no
 * tag either (`PeerNetwork.#upkeep`); a stream cut is retried. Counted as busy, they had a full node whose other peers
 * were all syncing hang up on the newcomer, a node reaching it on demand.
 */
const UPKEEP_PROTOCOLS: ReadonlySet<string> = new Set([CAPABILITIES_PROTOCOL, ADVERTS_SYNC_PROTOCOL])

export interface ConnectionPolicyOptions {
  /** Connections held at most. @default DEFAULT_MAX_CONNECTIONS */
  maxConnections?: number
  /** Peers connected to of this node's own accord (found through a relay's listing). @default DEFAULT_TARGET_PEERS */
  targetPeers?: number
}

/**
 * Which connections a node keeps: at most `maxConnections`, valued by tags: relays and PTN peers first, then
 * the peers this node is using; everyone else is reached on demand when a request needs them. This node dials only
 * `targetPeers` nodes of its own accord. The tags are set on the peer store too (libp2p's connection manager prunes by
 * them), and mirrored here so that a connection over the limit is closed in the same tick it opens: libp2p checks its
 * limit before inbound upgrades finish and not at all for dials, so several at once pass it.
 */
export class ConnectionPolicy {
  readonly maxConnections: number
  readonly targetPeers: number
  readonly #log: Logger
  #host: PeerHost | null = null
  /** PTN peers' peer ids. */
  readonly #ptnTagged = new Set<string>()
  /** Relays' peer ids: not counted among the peers dialed. */
  readonly #relays = new Set<string>()
  /** Peers in use (by peer id), until when. */
  readonly #inUse = new Map<string, number>()

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
    this.#inUse.clear()
    host?.addEventListener('connection:open', this.#onOpen)
  }

  /**
   * Every new connection: a second one to a peer already connected the same way (both direct, or both relayed) is
   * closed at once, the same one on both sides (see `duplicateToClose`), unless this node dialed both at two addresses
   * (`dialedApart`); and over the limit, the least valued idle
   * peer is hung up on at once (every connection to it: gossipsub keeps one stream per peer, on one connection, and
   * does not move it when that connection closes while another stays). libp2p's own limit is set one above ours
   * (`hostMaxConnections`), so that a node at the limit still lets a newcomer in, and this is what holds ours.
   */
  readonly #onOpen = (evt: CustomEvent<Connection>): void => {
    const host = this.#host
    if (host == null) return
    const opened = evt.detail
    // An AutoNAT dial-back (reachability.ts): a second connection, made only to prove an address dialable and closed by
    // its dialer once the nonce is answered. Closing it as a duplicate would fail the dial-back, or close the connection
    // the peer was already on (a node's relay connection, with its reservation); nor is it a peer to make room for.
    if (host.services.reachability.isDialBack(opened)) return
    const twin = host.getConnections(opened.remotePeer).find(connection => connection !== opened && connection.status === 'open' && connection.direct === opened.direct && !dialedApart(opened, connection))
    if (twin != null) {
      this.#close(duplicateToClose(host.peerId.toString(), opened, twin), 'a second connection to the same peer')
      return
    }
    const open = host.getConnections().filter(connection => connection.status === 'open')
    if (open.length <= this.maxConnections) return
    const victim = this.#leastValued(open)
    if (victim == null) {
      this.#close(opened, 'over the connection limit, every other connection busy')
      return
    }
    this.#hangUp(open, victim, 'over the connection limit')
  }

  #hangUp (connections: Connection[], peer: PeerId, why: string): void {
    for (const connection of connections) if (connection.remotePeer.equals(peer)) this.#close(connection, why)
  }

  #close (connection: Connection, why: string): void {
    this.#log.debug({ peer: connection.remotePeer.toString(), why }, 'closing a connection')
    try {
      connection.abort(new Error(`closed: ${why}`))
    } catch (err) {
      // The connection is gone either way, and a throw here, inside libp2p's 'connection:open' dispatch, would end the
      // process (yamux's goodbye to a socket that closed meanwhile no longer throws: see host/patches/libp2p-yamux.ts).
      this.#log.debug({ err, peer: connection.remotePeer.toString() }, 'closing a connection that was already closing')
    }
  }

  /** The limit to give libp2p's connection manager: one above ours, see `#onOpen`. */
  get hostMaxConnections (): number {
    return this.maxConnections + 1
  }

  /** How many more nodes to dial of this node's own accord now. */
  dialBudget (): number {
    const host = this.#host
    if (host == null) return 0
    const room = this.maxConnections - 1 - host.getConnections().filter(connection => connection.status === 'open').length
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
    const peer = nodeIDToPeerId(nodeID)
    if (shares === this.#ptnTagged.has(peer.toString())) return
    if (shares) this.#ptnTagged.add(peer.toString())
    else this.#ptnTagged.delete(peer.toString())
    this.#tag(peer, TAGS.ptn.name, shares ? TAGS.ptn.value : null)
  }

  /**
   * This node is about to use `nodeID` (open a stream to it): tagged as in use, and when it is not connected and the
   * limit is reached, the least valued idle peer is hung up on first to make room for it.
   */
  async using (nodeID: string): Promise<void> {
    const host = this.#host
    if (host == null) return
    const peer = nodeIDToPeerId(nodeID)
    this.#inUse.set(peer.toString(), Date.now() + TAGS.inUse.ttlMs)
    this.#tag(peer, TAGS.inUse.name, TAGS.inUse.value, TAGS.inUse.ttlMs)
    const open = host.getConnections().filter(connection => connection.status === 'open')
    if (host.getConnections(peer).length > 0 || open.length < this.maxConnections) return
    const victim = this.#leastValued(open)
    if (victim != null) this.#hangUp(open, victim, 'making room to reach a peer on demand')
  }

  /**
   * The peer worth least among those with no connection busy, the longest connected among equals (so that a node
   * reaching a full one on demand gets in, in place of one that has had its turn), or null when every one is busy.
   */
  #leastValued (connections: Connection[]): PeerId | null {
    const peers = new Map<string, { peer: PeerId, since: number, busy: boolean }>()
    for (const connection of connections) {
      const key = connection.remotePeer.toString()
      const held = peers.get(key) ?? { peer: connection.remotePeer, since: connection.timeline.open, busy: false }
      held.since = Math.min(held.since, connection.timeline.open)
      held.busy ||= busy(connection)
      peers.set(key, held)
    }
    let best: { peer: PeerId, since: number, value: number } | null = null
    for (const [key, { peer, since, busy }] of peers) {
      if (busy) continue
      const value = this.#value(key)
      if (best == null || value < best.value || (value === best.value && since < best.since)) best = { peer, since, value }
    }
    return best?.peer ?? null
  }

  /** What the tags this policy set on a peer add up to. */
  #value (peer: string): number {
    let value = 0
    if (this.#relays.has(peer)) value += TAGS.relay.value
    const until = this.#inUse.get(peer)
    if (until != null) {
      if (until > Date.now()) value += TAGS.inUse.value
      else this.#inUse.delete(peer)
    }
    if (this.#ptnTagged.has(peer)) value += TAGS.ptn.value
    return value
  }

  #tag (peer: PeerId, name: string, value: number | null, ttl?: number): void {
    const host = this.#host
    if (host == null) return
    host.peerStore.merge(peer, { tags: { [name]: value == null ? undefined : { value, ttl } } }).catch((err: unknown) => {
      this.#log.debug({ err, peer: peer.toString(), tag: name }, 'tagging a peer failed')
    })
  }
}

/**
 * Of two connections between the same two nodes, the one both close: the one dialed by the node with the greater peer
 * id when each dialed one (two nodes that dial each other at once), or else the newer. Each side decides alone, and
 * both decide the same.
 */
export function duplicateToClose (self: string, opened: Connection, twin: Connection): Connection {
  const dialer = (connection: Connection): string => connection.direction === 'outbound' ? self : connection.remotePeer.toString()
  const [a, b] = [dialer(opened), dialer(twin)]
  if (a === b) return opened
  return a > b ? opened : twin
}

/**
 * Two connections this node dialed to one peer at two addresses: dials of bare addresses (a relay's URL names no peer
 * id), each made on purpose by its dialer, which owns it. libp2p joins every other dial to a peer it knows, and closes
 * a second connection at the same address itself. Two relay URLs answer with one peer id when two relays share a key:
 * each URL's client must reach its own relay's directory, or nodes that reached one of them never see the others.
 */
function dialedApart (a: Connection, b: Connection): boolean {
  return a.direction === 'outbound' && b.direction === 'outbound' && !a.remoteAddr.equals(b.remoteAddr)
}

/** A connection carrying one of our protocols' streams now (a request, a transfer), upkeep aside: not closed to make room. */
function busy (connection: Connection): boolean {
  return connection.streams.some(({ protocol }) => protocol?.startsWith('/meshnode/') === true && !UPKEEP_PROTOCOLS.has(protocol))
}
