import { EventEmitter } from 'node:events'
import type { Connection, Stream } from '@libp2p/interface'
import type { Logger } from 'pino'
import { backoffDelayMs, isHostile } from '../../wire/index.ts'
import type { Admission, PeerType } from './admission.ts'
import { CAPABILITIES_PROTOCOL, fetchCapabilities, type CapabilityRecord } from './capabilities.ts'

export type PeerStatus = 'online' | 'degraded'
export type PeerConnection = 'direct' | 'relayed'

/** A peer in the table: a connected meshnode node whose signed capability record we verified. */
export interface PeerInfo {
  readonly nodeID: string
  readonly type: PeerType
  readonly status: PeerStatus
  /** Round trip of its connection, as libp2p's connection monitor last measured it; null until measured. */
  readonly latencyMs: number | null
  /** How we reach it: `relayed` while every connection we hold to it goes through a relay (a peer behind NAT before
   *  hole punching, or when punching fails), `direct` otherwise. */
  readonly connection: PeerConnection
  /** Unix ms when its current record arrived (at connect, and whenever it pushes a change). */
  readonly lastSeen: number
  /** Its latest verified record. */
  readonly record: CapabilityRecord
  /** The PTNs its certificates prove it a member of (verified by the PTN domain). */
  readonly ptnIDs: string[]
  /** Whether this node holds a connection to it; false for a node known by its advert only (reached on demand). */
  readonly connected: boolean
}

export interface PeerTableEvents {
  /** A peer entered the table (its first record verified). */
  'peer:online': [peer: PeerInfo]
  /** A newer record, or a change of its type or of what its certificates prove. */
  'peer:updated': [peer: PeerInfo]
  /** A peer left the table: disconnected, de-admitted (a setting turned off) or misbehaving. */
  'peer:offline': [nodeID: string]
}

export interface PeerTableDeps {
  admission: Admission
  /** A stream to a connected node, on the connection we hold. */
  openStream (nodeID: string, protocol: string, options: { signal: AbortSignal }): Promise<Stream>
  /** One libp2p ping: the latency of a peer before its connection monitor has measured one. */
  ping (nodeID: string, options: { signal: AbortSignal }): Promise<number>
  /** The open connections to a node. */
  connections (nodeID: string): Connection[]
  /** A node sent a malformed, oversized or forged record: ban it and hang up. */
  misbehaved (nodeID: string, err: unknown): Promise<void>
  log: Logger
}

export interface PeerTableOptions {
  /** Round trip above which a peer is `degraded`. @default 2_000 */
  degradedLatencyMs?: number
  /** Deadline of one record fetch. @default 10_000 */
  fetchTimeoutMs?: number
  /** First retry of a failed fetch; doubles to `maxRetryMs` (the wire's backoff). @default 500 */
  minRetryMs?: number
  /** @default 30_000 */
  maxRetryMs?: number
}

/** First pings tried while a listed peer has no latency (backing off to `maxRetryMs`: a minute and a half at most, in all). */
const PING_ATTEMPTS = 8

interface Entry {
  nodeID: string
  type: PeerType
  record: CapabilityRecord
  ptnIDs: string[]
  lastSeen: number
  /** The first latency measured (one ping at admission), until the connection monitor has its own. */
  pingMs: number | null
}

/**
 * The peers of this node and what they offer. A connected, admitted node enters the table once its record is fetched
 * and verified; after that the table changes only when the peer pushes a newer record (a higher version) or its
 * admission changes, and the node leaves it when its last connection closes (libp2p's connection monitor closes one
 * whose pings fail). Latency is the connection's `rtt`, measured by libp2p: there is no heartbeat of our own.
 */
export class PeerTable extends EventEmitter<PeerTableEvents> {
  readonly #deps: PeerTableDeps
  readonly #options: Required<PeerTableOptions>
  readonly #entries = new Map<string, Entry>()
  /** Fetches under way (no second one at once), with how often each has failed. */
  readonly #fetching = new Map<string, number>()
  /** Connected nodes that do not speak our capabilities protocol (the relay, foreign libp2p nodes), until they reconnect. */
  readonly #foreign = new Set<string>()
  readonly #retries = new Map<string, NodeJS.Timeout>()
  #shutdown: AbortController | null = null

  constructor (deps: PeerTableDeps, options: PeerTableOptions = {}) {
    super()
    this.#deps = deps
    this.#options = {
      degradedLatencyMs: options.degradedLatencyMs ?? 2_000,
      fetchTimeoutMs: options.fetchTimeoutMs ?? 10_000,
      minRetryMs: options.minRetryMs ?? 500,
      maxRetryMs: options.maxRetryMs ?? 30_000
    }
  }

  start (): void {
    this.#shutdown = new AbortController()
  }

  stop (): void {
    this.#shutdown?.abort()
    this.#shutdown = null
    for (const timer of this.#retries.values()) clearTimeout(timer)
    this.#retries.clear()
    for (const nodeID of [...this.#entries.keys()]) this.drop(nodeID)
    this.#foreign.clear()
  }

  has (nodeID: string): boolean {
    return this.#entries.has(nodeID)
  }

  peer (nodeID: string): PeerInfo | null {
    const entry = this.#entries.get(nodeID)
    return entry == null ? null : this.#info(entry)
  }

  /** The peer table, most recently heard from first. */
  peers (): PeerInfo[] {
    return [...this.#entries.values()].map(entry => this.#info(entry)).sort((a, b) => b.lastSeen - a.lastSeen)
  }

  nodeIDs (): string[] {
    return [...this.#entries.keys()]
  }

  counts (): { lan: number, wan: number } {
    let lan = 0
    let wan = 0
    for (const entry of this.#entries.values()) {
      if (entry.type === 'lan') lan++
      else wan++
    }
    return { lan, wan }
  }

  /** A connected node that may be a peer: its record is fetched, unless it is in the table or being fetched. */
  consider (nodeID: string): void {
    const signal = this.#shutdown?.signal
    if (signal == null || signal.aborted) return
    if (this.#entries.has(nodeID) || this.#fetching.has(nodeID) || this.#retries.has(nodeID) || this.#foreign.has(nodeID)) return
    if (this.#deps.admission.typeOf(nodeID) == null) return
    this.#fetch(nodeID, 0, signal).catch((err: unknown) => { this.#deps.log.error({ err, nodeID }, 'peer record fetch failed unexpectedly') })
  }

  /** Its last connection closed: it leaves the table, and is considered afresh when it comes back. */
  disconnected (nodeID: string): void {
    this.#foreign.delete(nodeID)
    const retry = this.#retries.get(nodeID)
    if (retry != null) clearTimeout(retry)
    this.#retries.delete(nodeID)
    this.drop(nodeID)
  }

  /**
   * A record arrived, fetched or pushed, already verified as signed by `nodeID`. Kept when its version is newer than
   * the one held (an equal one is the same record again; an older one is ignored).
   */
  received (nodeID: string, record: CapabilityRecord): void {
    const type = this.#deps.admission.typeOf(nodeID)
    if (type == null) {
      this.drop(nodeID)   // de-admitted meanwhile (a setting turned off)
      return
    }
    if (this.#deps.connections(nodeID).every(connection => connection.status !== 'open')) {
      // Gone meanwhile: a fetch or push that finished after its last connection closed would bring back a peer that
      // nothing would ever drop again (its disconnect has passed).
      this.drop(nodeID)
      return
    }
    const entry = this.#entries.get(nodeID)
    if (entry != null && record.version <= entry.record.version) {
      if (record.version < entry.record.version) this.#deps.log.debug({ nodeID, version: record.version, held: entry.record.version }, 'peer sent an older record; ignored')
      return
    }
    const ptnIDs = this.#deps.admission.ptnIDsOf(nodeID, record.ptnCertificates)
    if (entry == null) {
      const added: Entry = { nodeID, type, record, ptnIDs, lastSeen: Date.now(), pingMs: null }
      this.#entries.set(nodeID, added)
      // Its first latency: the fetch's own ping sets it before this timer fires; a peer that entered by a push (its
      // fetch still under way, or failed) or whose first ping failed is pinged again, backing off.
      const signal = this.#shutdown?.signal
      if (signal != null) this.#pingAgain(nodeID, 1, signal)
      this.#deps.log.info({ nodeID, name: record.name, type, model: record.models.loaded }, 'peer online')
      this.#emitSafely('peer:online', this.#info(added))
      return
    }
    Object.assign(entry, { type, record, ptnIDs, lastSeen: Date.now() })
    this.#emitSafely('peer:updated', this.#info(entry))
  }

  /** Who may be a peer changed: entries no longer admitted leave; the others get their type and PTNs again. */
  recheck (): void {
    for (const entry of [...this.#entries.values()]) {
      const type = this.#deps.admission.typeOf(entry.nodeID)
      if (type == null) {
        this.drop(entry.nodeID)
        continue
      }
      const ptnIDs = this.#deps.admission.ptnIDsOf(entry.nodeID, entry.record.ptnCertificates)
      if (type === entry.type && sameSet(ptnIDs, entry.ptnIDs)) continue
      Object.assign(entry, { type, ptnIDs })
      this.#emitSafely('peer:updated', this.#info(entry))
    }
  }

  drop (nodeID: string): void {
    if (!this.#entries.delete(nodeID)) return
    this.#deps.log.info({ nodeID }, 'peer offline')
    this.#emitSafely('peer:offline', nodeID)
  }

  /** Fetches a record and a first latency; a failure that is not the peer's fault is retried while it stays connected. */
  async #fetch (nodeID: string, failures: number, signal: AbortSignal): Promise<void> {
    this.#fetching.set(nodeID, failures)
    const deadline = AbortSignal.any([signal, AbortSignal.timeout(this.#options.fetchTimeoutMs)])
    try {
      const stream = await this.#deps.openStream(nodeID, CAPABILITIES_PROTOCOL, { signal: deadline })
      const [record, pingMs] = await Promise.all([
        fetchCapabilities(stream, nodeID, { signal: deadline }),
        this.#deps.ping(nodeID, { signal: deadline }).then(ms => ms, (err: unknown) => {
          // A peer without a ping answer still has a record; the connection monitor measures it later.
          this.#deps.log.debug({ err, nodeID }, 'first ping failed')
          return null
        })
      ])
      if (signal.aborted) return
      this.#fetching.delete(nodeID)
      this.received(nodeID, record)
      const entry = this.#entries.get(nodeID)
      if (entry != null && pingMs != null) entry.pingMs = pingMs
    } catch (err) {
      this.#fetching.delete(nodeID)
      if (signal.aborted) return
      this.#fetchFailed(nodeID, failures + 1, err, signal)
    }
  }

  /** Pings a listed peer, backing off, until it has a latency (a ping answered, or an `rtt` on a connection): a first
   *  ping can fail (its connection closed as a duplicate, a busy peer) or never run (the peer entered by a push while
   *  its fetch failed), and a listed peer gets a latency within seconds, not only at the connection monitor's ping. */
  #pingAgain (nodeID: string, attempt: number, signal: AbortSignal): void {
    if (attempt > PING_ATTEMPTS) return
    const timer = setTimeout(() => {
      const entry = this.#entries.get(nodeID)
      if (signal.aborted || entry == null || entry.pingMs != null || this.#deps.connections(nodeID).some(connection => connection.rtt != null)) return
      this.#deps.ping(nodeID, { signal: AbortSignal.any([signal, AbortSignal.timeout(this.#options.fetchTimeoutMs)]) }).then((ms) => {
        const current = this.#entries.get(nodeID)
        if (current != null) current.pingMs = ms
      }, (err: unknown) => {
        this.#deps.log.debug({ err, nodeID, attempt }, 'ping failed')
        this.#pingAgain(nodeID, attempt + 1, signal)
      })
    }, backoffDelayMs(attempt, { minMs: this.#options.minRetryMs, maxMs: this.#options.maxRetryMs }))
    timer.unref()
  }

  #fetchFailed (nodeID: string, failures: number, err: unknown, signal: AbortSignal): void {
    if (isUnsupportedProtocol(err)) {
      // The relay, or a libp2p node that is not meshnode: leave it alone until it reconnects.
      this.#foreign.add(nodeID)
      return
    }
    if (isHostile(err)) {
      this.#deps.misbehaved(nodeID, err).catch((reportErr: unknown) => { this.#deps.log.error({ err: reportErr, nodeID }, 'disconnecting a misbehaving peer failed') })
      return
    }
    if (this.#deps.connections(nodeID).length === 0) return   // gone: considered again when it reconnects
    const retryInMs = backoffDelayMs(failures, { minMs: this.#options.minRetryMs, maxMs: this.#options.maxRetryMs })
    this.#deps.log.debug({ err, nodeID, failures, retryInMs }, 'peer record fetch failed; retrying')
    const timer = setTimeout(() => {
      this.#retries.delete(nodeID)
      if (signal.aborted || this.#entries.has(nodeID) || this.#deps.admission.typeOf(nodeID) == null) return
      this.#fetch(nodeID, failures, signal).catch((fetchErr: unknown) => { this.#deps.log.error({ err: fetchErr, nodeID }, 'peer record fetch failed unexpectedly') })
    }, retryInMs)
    timer.unref()
    this.#retries.set(nodeID, timer)
  }

  #info (entry: Entry): PeerInfo {
    const connections = this.#deps.connections(entry.nodeID)
    const rtts = connections.map(connection => connection.rtt).filter((rtt): rtt is number => rtt != null)
    const latencyMs = rtts.length > 0 ? Math.round(Math.min(...rtts)) : entry.pingMs
    return {
      nodeID: entry.nodeID,
      type: entry.type,
      status: latencyMs == null || latencyMs <= this.#options.degradedLatencyMs ? 'online' : 'degraded',
      latencyMs,
      connection: connections.length > 0 && connections.every(connection => !connection.direct) ? 'relayed' : 'direct',
      lastSeen: entry.lastSeen,
      record: entry.record,
      ptnIDs: [...entry.ptnIDs],
      connected: true
    }
  }

  #emitSafely<K extends keyof PeerTableEvents> (event: K, ...args: PeerTableEvents[K]): void {
    try {
      (this.emit as (event: K, ...args: PeerTableEvents[K]) => boolean)(event, ...args)
    } catch (err) {
      // A listener's bug must not break the peer table.
      this.#deps.log.error({ err, event }, 'peer table listener threw')
    }
  }
}

function sameSet (a: string[], b: string[]): boolean {
  return a.length === b.length && a.every(x => b.includes(x))
}

function isUnsupportedProtocol (err: unknown): boolean {
  // Matched by name: libp2p's errors may come from more than one copy of @libp2p/interface.
  return err instanceof Error && (err.name === 'UnsupportedProtocolError' || err.name === 'ProtocolNegotiationError' || /protocol selection failed/i.test(err.message))
}
