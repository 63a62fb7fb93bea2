import { EventEmitter } from 'node:events'
import { setTimeout as delay } from 'node:timers/promises'
import type { Connection, PeerId } from '@libp2p/interface'
import { multiaddr, type Multiaddr } from '@multiformats/multiaddr'
import type { Libp2p } from 'libp2p'
import type { Logger } from 'pino'
import type { NodeIdentity } from '../../identity/index.ts'
import { backoffDelayMs } from '../../wire/index.ts'
import { MAX_DIRECTORY_ENTRIES, advertisedAddrs, listDirectory, registerInDirectory, shuffle, signDirectoryRecord, type DirectoryRecord } from '../relay/directory.ts'
import { nodeIDToPeerId } from '../host/peer-ids.ts'
import { isCircuit, lastPeerId, relayMultiaddrFromUrl } from '../host/relay-address.ts'

/** A listing asked for while this node wants more peers holds at least this many records (2 per peer wanted above). */
const LISTING_SAMPLE_MIN = 16

export interface WanClientDeps {
  /** Built by `createPeerHost` with `relayUrl` set, so that it takes a reservation on the relay. */
  host: Libp2p
  identity: NodeIdentity
  /**
   * How many more listed nodes to connect to now (the connection policy's room): the others are remembered with
   * their addresses and dialed on demand. @default unbounded (a full mesh)
   */
  dialBudget?: () => number
  log: Logger
}

export interface WanClientOptions {
  /** `wan_relay_url`: `ws://host:port` or a multiaddr, with or without `/p2p/<relay>`. */
  relayUrl: string
  /** Re-register and re-list this often while connected (a record lives 90 s at the relay). @default 30_000 */
  syncIntervalMs?: number
  /** First re-list after (re)connecting, doubling up to `syncIntervalMs`: after a relay restart the others
   *  re-register within seconds, and we should not wait a full interval to see them. @default 1_000 */
  fastSyncMs?: number
  /** Reconnect backoff (the wire's `backoffDelayMs`), doubling from min to max, with jitter. @default 500 */
  minBackoffMs?: number
  /** @default 30_000 */
  maxBackoffMs?: number
  /** How long to wait for the relay reservation before registering direct addresses only. @default 10_000 */
  reservationTimeoutMs?: number
  /** Deadline of one dial (the relay, or one group of a peer's addresses). @default 10_000 */
  dialTimeoutMs?: number
  /**
   * Failures in a row after which a relay that never answered a directory sync is given up ('relay:failed'; the
   * client stops). null: retried for as long as the client runs (a configured relay). @default null
   */
  giveUpAfterFailures?: number | null
}

/** A peer found through the relay that we hold a connection to. */
export interface WanPeer {
  readonly nodeID: string
  readonly peerId: PeerId
  /** The addresses of its latest directory record. */
  addrs: string[]
  /** Unix ms of the latest listing that named it. */
  lastSeen: number
}

export interface WanClientEvents {
  /** A peer listed by the relay is now connected (directly if it could be dialed, otherwise through the relay). */
  'peer:discovered': [nodeID: string, addrs: string[]]
  /** A discovered peer has no connection left and could not be redialed, or is no longer listed. */
  'peer:lost': [nodeID: string]
  'relay:connected': [relayPeerId: string]
  /** The relay answered a directory sync: it is a meshnode relay, not just whatever holds that peer id's key. */
  'relay:synced': [relayPeerId: string]
  'relay:disconnected': [relayPeerId: string]
  /** Given up (`giveUpAfterFailures`): the relay never answered as one. The client has stopped trying. */
  'relay:failed': []
}

/**
 * WAN presence through a meshnode relay: connect to it (reconnecting with capped exponential backoff), hold a
 * reservation so relayed peers can reach us, keep our signed record in its directory, and connect to the peers it
 * lists, directly first and through the relay otherwise. A restarted relay starts with an empty directory; the
 * fast re-sync after reconnecting fills it again. The client speaks to the relay at its URL over the connection it
 * opened there, not over any connection to the relay's peer id: two relays that share a key are one peer to libp2p,
 * and a client that asked whichever of them libp2p picked registered at one directory only, so that nodes which
 * reached the other never saw each other.
 */
export class WanClient extends EventEmitter<WanClientEvents> {
  readonly #host: Libp2p
  readonly #identity: NodeIdentity
  readonly #log: Logger
  readonly #relayAddr: Multiaddr
  readonly #syncIntervalMs: number
  readonly #fastSyncMs: number
  readonly #minBackoffMs: number
  readonly #maxBackoffMs: number
  readonly #reservationTimeoutMs: number
  readonly #dialTimeoutMs: number
  readonly #giveUpAfterFailures: number | null
  /** Whether the relay ever answered a directory sync. */
  #everSynced = false
  readonly #peers = new Map<string, WanPeer>()
  readonly #dialBudget: () => number
  #relayPeer: PeerId | null = null
  /** The connection this client opened at `relayAddr`: its directory requests go over it, and it is the relay's presence. */
  #connection: Connection | null = null
  #relayConnected = false
  #shutdown: AbortController | null = null
  #running: Promise<void> | null = null

  constructor (deps: WanClientDeps, options: WanClientOptions) {
    super()
    this.#host = deps.host
    this.#identity = deps.identity
    this.#log = deps.log
    this.#dialBudget = deps.dialBudget ?? (() => Number.POSITIVE_INFINITY)
    this.#relayAddr = relayMultiaddrFromUrl(options.relayUrl)   // a bad URL fails here, at configuration time
    this.#syncIntervalMs = options.syncIntervalMs ?? 30_000
    this.#fastSyncMs = Math.min(options.fastSyncMs ?? 1_000, this.#syncIntervalMs)
    this.#minBackoffMs = options.minBackoffMs ?? 500
    this.#maxBackoffMs = Math.max(options.maxBackoffMs ?? 30_000, this.#minBackoffMs)
    this.#reservationTimeoutMs = options.reservationTimeoutMs ?? 10_000
    this.#dialTimeoutMs = options.dialTimeoutMs ?? 10_000
    this.#giveUpAfterFailures = options.giveUpAfterFailures ?? null
  }

  /** The relay's peer id, once connected: learned from the connection when the URL does not name it. */
  get relayPeerId (): PeerId | null {
    return this.#relayPeer
  }

  get relayConnected (): boolean {
    return this.#relayConnected
  }

  /** The peers found through the relay and currently connected. */
  peers (): WanPeer[] {
    return [...this.#peers.values()].map(peer => ({ ...peer, addrs: [...peer.addrs] }))
  }

  /** Starts the background loop and returns at once; the relay may be down, the loop keeps trying. */
  async start (): Promise<void> {
    if (this.#running != null) return
    const shutdown = new AbortController()
    this.#shutdown = shutdown
    this.#host.addEventListener('peer:disconnect', this.#onPeerDisconnect)
    this.#running = this.#run(shutdown.signal)
  }

  /** Stops the loop, waits for it, and leaves the relay (our record goes with the connection). */
  async stop (): Promise<void> {
    if (this.#running == null || this.#shutdown == null) return
    this.#shutdown.abort()
    await this.#running
    this.#host.removeEventListener('peer:disconnect', this.#onPeerDisconnect)
    this.#running = null
    this.#shutdown = null
    const relay = this.#relayPeer
    try {
      // A relay that may be given up and never answered as one may be a peer's key: that connection is the peer's.
      const mayBePeer = this.#giveUpAfterFailures != null && !this.#everSynced
      if (relay != null && !mayBePeer && this.#isConnectedTo(relay)) await this.#host.hangUp(relay, { signal: AbortSignal.timeout(this.#dialTimeoutMs) })
    } finally {
      this.#connection = null
      this.#relayConnected = false
      this.#peers.clear()
    }
  }

  /** A peer is lost as soon as its last connection closes (a relayed one dies with the relay); the next sync
   *  redials it if it is still listed, and it is discovered again. */
  readonly #onPeerDisconnect = (evt: CustomEvent<PeerId>): void => {
    const nodeID = [...this.#peers.values()].find(peer => peer.peerId.equals(evt.detail))?.nodeID
    if (nodeID == null || this.#isConnectedTo(evt.detail)) return
    this.#peers.delete(nodeID)
    this.#log.info({ nodeID }, 'WAN peer lost')
    this.#emitSafely('peer:lost', nodeID)
  }

  async #run (signal: AbortSignal): Promise<void> {
    let failures = 0
    while (!signal.aborted) {
      try {
        const relay = await this.#connectRelay(signal)
        await this.#waitForReservation(relay, signal)
        let nextSyncMs = this.#fastSyncMs
        let synced = false
        while (!signal.aborted && relay.status === 'open') {
          await this.#sync(relay, signal)
          failures = 0
          if (!synced) this.#emitSafely('relay:synced', relay.remotePeer.toString())
          synced = this.#everSynced = true
          await this.#nextRound(relay, nextSyncMs, signal)
          nextSyncMs = Math.min(nextSyncMs * 2, this.#syncIntervalMs)
        }
        if (!signal.aborted) this.#relayGone(relay.remotePeer)
      } catch (err) {
        if (signal.aborted) break
        failures++
        if (!this.#everSynced && this.#giveUpAfterFailures != null && failures >= this.#giveUpAfterFailures) {
          this.#log.warn({ err, relay: this.#relayAddr.toString() }, 'giving up on a relay that never answered as one')
          if (this.#relayPeer != null) this.#relayGone(this.#relayPeer)
          this.#emitSafely('relay:failed')
          return
        }
        const retryInMs = backoffDelayMs(failures, { minMs: this.#minBackoffMs, maxMs: this.#maxBackoffMs })
        this.#log.warn({ err, retryInMs, relay: this.#relayAddr.toString() }, 'relay unreachable or directory sync failed; retrying')
        if (this.#relayPeer != null && this.#connection?.status !== 'open') this.#relayGone(this.#relayPeer)
        await this.#sleep(retryInMs, signal)
      }
    }
  }

  async #connectRelay (signal: AbortSignal): Promise<Connection> {
    if (this.#connection?.status === 'open') {
      this.#relayUp(this.#connection.remotePeer)
      return this.#connection
    }
    // `force`: a connection at this address, even when one to the same peer id is open at another (a URL naming the
    // relay's peer id would otherwise be answered with that one, at whichever relay it goes to).
    const connection = await this.#host.dial(this.#relayAddr, { signal: AbortSignal.any([signal, AbortSignal.timeout(this.#dialTimeoutMs)]), force: true })
    const relay = connection.remotePeer
    if (this.#relayPeer != null && !this.#relayPeer.equals(relay)) {
      this.#log.warn({ previous: this.#relayPeer.toString(), current: relay.toString() }, 'relay answers with a new peer id')
    }
    this.#connection = connection
    this.#relayPeer = relay
    this.#relayUp(relay)
    return connection
  }

  #relayUp (relay: PeerId): void {
    if (this.#relayConnected) return
    this.#relayConnected = true
    this.#log.info({ relay: relay.toString() }, 'connected to relay')
    this.#emitSafely('relay:connected', relay.toString())
  }

  #relayGone (relay: PeerId): void {
    if (!this.#relayConnected) return
    this.#relayConnected = false
    this.#log.info({ relay: relay.toString() }, 'relay connection lost')
    this.#emitSafely('relay:disconnected', relay.toString())
  }

  #isConnectedTo (peer: PeerId): boolean {
    return this.#host.getConnections(peer).some(connection => connection.status === 'open')
  }

  #hasReservation (relay: PeerId): boolean {
    const via = `/p2p/${relay.toString()}/p2p-circuit`
    return this.#host.getMultiaddrs().some(ma => ma.toString().includes(via))
  }

  /**
   * The circuit transport reserves a slot once identify has told it the relay speaks the hop protocol, and its
   * listener then emits 'transport:listening'. ('self:peer:update' is no signal for this: libp2p debounces it by a
   * second and skips it when an address it knew before, such as the same circuit address after a relay restart,
   * comes back.)
   */
  async #waitForReservation (relay: Connection, signal: AbortSignal): Promise<void> {
    const deadline = AbortSignal.any([signal, AbortSignal.timeout(this.#reservationTimeoutMs)])
    while (!this.#hasReservation(relay.remotePeer) && relay.status === 'open') {
      if (deadline.aborted) {
        signal.throwIfAborted()
        // Registering direct addresses still lets dialable peers find us; the record is renewed when addresses change.
        this.#log.warn({ relay: relay.remotePeer.toString() }, 'no relay reservation yet; registering direct addresses only')
        return
      }
      await this.#wake(['transport:listening', 'connection:close'], deadline, relay)
    }
  }

  /** Waits for the next sync: its interval, a change of our addresses (a new reservation), or the relay leaving. */
  async #nextRound (relay: Connection, ms: number, signal: AbortSignal): Promise<void> {
    const timer = AbortSignal.timeout(ms)
    await this.#wake(['transport:listening', 'self:peer:update', 'connection:close'], AbortSignal.any([signal, timer]), relay)
  }

  /** Resolves when the host emits one of `events` (a `connection:close` only of `relay`) or `until` aborts. */
  async #wake (events: Array<'transport:listening' | 'self:peer:update' | 'connection:close'>, until: AbortSignal, relay: Connection): Promise<void> {
    if (until.aborted || relay.status !== 'open') return
    const { promise, resolve } = Promise.withResolvers<void>()
    const onEvent = (evt: Event): void => {
      if (evt.type === 'connection:close' && (evt as CustomEvent<Connection>).detail !== relay) return
      resolve()
    }
    for (const type of events) this.#host.addEventListener(type, onEvent)
    until.addEventListener('abort', () => { resolve() }, { once: true })
    try {
      await promise
    } finally {
      for (const type of events) this.#host.removeEventListener(type, onEvent)
    }
  }

  async #sleep (ms: number, signal: AbortSignal): Promise<void> {
    try {
      await delay(ms, undefined, { signal, ref: false })
    } catch (err) {
      if (!signal.aborted) throw err   // an abort is the expected way out of the wait; the loop checks the signal
    }
  }

  async #sync (relay: Connection, signal: AbortSignal): Promise<void> {
    await registerInDirectory(this.#host, relay, signDirectoryRecord(this.#identity, advertisedAddrs(this.#host)), { signal })
    // The listing is for finding nodes to dial: none while this node has the peers it wants (the others are known by
    // their adverts), and then a random sample a few times the number wanted, not the whole directory, so that a
    // node's idle traffic does not grow with the network. (Unbounded, a full mesh, it is the whole directory.)
    const budget = this.#dialBudget()
    if (budget <= 0) {
      this.#dropLost()
      return
    }
    const listing = await listDirectory(this.#host, relay, { signal, limit: Math.min(MAX_DIRECTORY_ENTRIES, Math.max(LISTING_SAMPLE_MIN, 2 * budget)) })
    if (listing.rejected > 0) this.#log.warn({ relay: relay.remotePeer.toString(), rejected: listing.rejected }, 'relay listed records that do not verify')
    const listed = listing.records.filter(record => record.nodeID !== this.#identity.nodeID)
    const peerIds = new Map(listed.map(record => [record.nodeID, nodeIDToPeerId(record.nodeID)]))
    // A bounded number of random listed nodes, not all of them: the rest are reachable on demand by their addresses.
    const unconnected = shuffle(listed.filter(record => !this.#isConnectedTo(peerIds.get(record.nodeID) as PeerId)))
    const dial = unconnected.slice(0, Math.max(0, this.#dialBudget()))
    await Promise.all(dial.map(async record => { await this.#reach(record, peerIds.get(record.nodeID) as PeerId, signal) }))
    signal.throwIfAborted()

    const now = Date.now()
    for (const record of listed) {
      const peerId = peerIds.get(record.nodeID) as PeerId
      if (!this.#isConnectedTo(peerId)) continue
      const known = this.#peers.get(record.nodeID)
      if (known != null) {
        known.addrs = record.addrs
        known.lastSeen = now
        continue
      }
      this.#peers.set(record.nodeID, { nodeID: record.nodeID, peerId, addrs: record.addrs, lastSeen: now })
      this.#log.info({ nodeID: record.nodeID }, 'WAN peer discovered')
      this.#emitSafely('peer:discovered', record.nodeID, [...record.addrs])
    }
    this.#dropLost()
  }

  /** Forgets the peers found through the relay that are no longer connected. */
  #dropLost (): void {
    for (const [nodeID, peer] of this.#peers) {
      // Still connected (directly, say) keeps a peer even when the relay forgot it, e.g. right after a relay restart.
      if (this.#isConnectedTo(peer.peerId)) continue
      this.#peers.delete(nodeID)
      this.#log.info({ nodeID }, 'WAN peer lost')
      this.#emitSafely('peer:lost', nodeID)
    }
  }

  /** Connects to a listed peer unless already connected: its direct addresses first, then its circuit addresses. */
  async #reach (record: DirectoryRecord, peerId: PeerId, signal: AbortSignal): Promise<void> {
    if (this.#isConnectedTo(peerId)) return
    const addrs = dialableAddrs(record.addrs, peerId)
    const direct = addrs.filter(ma => !isCircuit(ma))
    const circuit = addrs.filter(ma => isCircuit(ma))
    for (const group of [direct, circuit]) {
      if (group.length === 0) continue
      try {
        await this.#host.dial(group, { signal: AbortSignal.any([signal, AbortSignal.timeout(this.#dialTimeoutMs)]) })
        return
      } catch (err) {
        signal.throwIfAborted()
        // Expected for a peer behind NAT (direct) or one that just left (circuit); the next group or sync retries.
        this.#log.debug({ err, nodeID: record.nodeID, addrs: group.map(String) }, 'dial to WAN peer failed')
      }
    }
  }

  #emitSafely<K extends keyof WanClientEvents> (event: K, ...args: WanClientEvents[K]): void {
    try {
      // The cast: node's typed EventEmitter cannot relate a generic key to its argument tuple.
      (this.emit as (event: K, ...args: WanClientEvents[K]) => boolean)(event, ...args)
    } catch (err) {
      // A listener's failure is the listener's bug; it must not stop our presence on the relay.
      this.#log.error({ err, event }, 'WanClient event listener threw')
    }
  }
}

/** Parses a record's addresses for dialing `peerId`, each ending in `/p2p/<peerId>`; any naming another peer is dropped. */
export function dialableAddrs (addrs: string[], peerId: PeerId): Multiaddr[] {
  const out: Multiaddr[] = []
  const id = peerId.toString()
  for (const addr of addrs) {
    const ma = multiaddr(addr)   // records were schema-checked: every address parses
    const named = lastPeerId(ma)
    if (named === id) out.push(ma)
    else if (named == null) out.push(ma.encapsulate(`/p2p/${id}`))   // e.g. `<relay>/p2p-circuit` without the target
  }
  return out
}
