import { EventEmitter } from 'node:events'
import { setTimeout as delay } from 'node:timers/promises'
import type { Connection, PeerId, PeerInfo as Libp2pPeerInfo, Stream } from '@libp2p/interface'
import type { Logger } from 'pino'
import { NotFoundError, UnavailableError } from '../errors.ts'
import type { NodeIdentity } from '../identity/index.ts'
import type { Settings, SettingsChange } from '../settings/index.ts'
import { detectHardware, type HardwareInfo } from '../system/hardware.ts'
import {
  CAPABILITIES_PROTOCOL, MAX_DEMAND_ENTRIES, MAX_INBOUND_CAPABILITIES_STREAMS, createCapabilitiesHandler, fetchCapabilities,
  signCapabilities, type CapabilityRecord
} from './capabilities.ts'
import { CLUSTER_PROTOCOL, MAX_INBOUND_CLUSTER_STREAMS, createClusterHandler, deriveClusterKey, joinCluster } from './cluster.ts'
import { publicSlots } from '../serving/index.ts'
import { ProtocolError } from '../wire/index.ts'
import type { PeerHost } from './libp2p-node.ts'
import { DEFAULT_LAN_LISTEN, DEFAULT_LISTEN, handleProtocol, nodeIDToPeerId, openStream, peerIdToNodeID } from './peer-ids.ts'
import { WanClient, type WanClientOptions } from './wan.ts'

/** How a peer reached us: found by mDNS and admitted to the LAN cluster, or met through the WAN relay. */
export type PeerType = 'lan' | 'wan'
export type PeerStatus = 'online' | 'degraded'

/** A peer in the table: a connected meshnode node whose signed capability record we verified. */
export interface PeerInfo {
  readonly nodeID: string
  readonly type: PeerType
  readonly status: PeerStatus
  /** Round trip of the last ping; null until one has answered. */
  readonly latencyMs: number | null
  /** Unix ms of the last successful heartbeat (record fetched). */
  readonly lastSeen: number
  /** Its latest verified record. */
  readonly record: CapabilityRecord
  /** The PTNs its certificates prove it a member of (verified by `verifyPtnCertificates`). */
  readonly ptnIDs: string[]
}

export interface PeerNetworkEvents {
  /** A peer entered the table (its first record verified). */
  'peer:online': [peer: PeerInfo]
  /** A newer record, a status or latency change. */
  'peer:updated': [peer: PeerInfo]
  /** A peer left the table: disconnected, dead, de-admitted (a setting turned off) or misbehaving. */
  'peer:offline': [nodeID: string]
}

/** A JSON value, as the agent profile is advertised. */
export type JsonValue = string | number | boolean | null | JsonValue[] | { [key: string]: JsonValue }

/**
 * What this node advertises, asked for each time a peer fetches the record. Each is supplied by the domain that owns
 * it; every one has a default so the network works before that domain exists.
 */
export interface CapabilityProviders {
  /** Loaded model and models on disk. @default the engine's loaded model */
  models?: () => { loaded: string | null, downloaded: string[] }
  /** Price per 1000 generated tokens, micro-credits. @default 0 */
  pricePer1kTokensMicro?: () => number
  /** This node's PTN certificates (`certData` strings). @default [] */
  ptnCertificates?: () => string[]
  /** This node's agent profile. @default null */
  agentProfile?: () => { [key: string]: JsonValue } | null
  /**
   * The PTN ids a peer's certificates prove (signature, expiry, that they name `nodeID`). Only these count as the
   * peer's memberships; an unverifiable certificate is ignored. @default none are trusted
   */
  verifyPtnCertificates?: (nodeID: string, certificates: string[]) => string[]
}

export interface PeerNetworkDeps {
  identity: NodeIdentity
  settings: { get (): Settings, onChange (listener: (change: SettingsChange) => void): () => void }
  log: Logger
  /** The node's display name. @default `meshnode-<first 8 of nodeID>` */
  name?: string
  /** @default detectHardware() */
  hardware?: HardwareInfo
  /** Slots, queue and loaded model, advertised to peers. */
  engine?: { stats (): { slots: number, busySlots: number, queued: number }, loaded (): { modelID: string } | null }
  providers?: CapabilityProviders
}

export interface PeerNetworkOptions {
  /** libp2p listen addresses. @default loopback TCP and WebSocket on free ports */
  listen?: string[]
  /** Listened on while `cluster_enabled` is on. @default every interface, TCP, a free port */
  lanListen?: string[]
  /** Ping and record refresh of every peer; also how soon a new connection is tried again. @default 10_000 */
  heartbeatIntervalMs?: number
  /** Round trip above which a peer is `degraded`. @default 2_000 */
  degradedLatencyMs?: number
  /** Missed heartbeats after which a peer is dropped and hung up on. @default 3 */
  deadAfterMissed?: number
  /** How long a peer that sent a malformed, oversized or forged message stays refused. @default 600_000 */
  banMs?: number
  /** Tunables of the WAN client (sync interval, backoff). */
  wan?: Omit<WanClientOptions, 'relayUrl'>
  /** mDNS query interval. @default 10_000 */
  mdnsQueryIntervalMs?: number
}

export interface HandleOptions {
  /** Streams one peer may have open at once on this protocol. */
  maxInboundStreams: number
  /**
   * Accept streams from any connected node, not only admitted peers (LAN cluster members, WAN peers while WAN is
   * on). Only admission itself needs this. @default false
   */
  allowStrangers?: boolean
}

/** The remote side of an inbound stream. */
export interface RemotePeer {
  readonly nodeID: string
  readonly connection: Connection
}

export type PeerStreamHandler = (stream: Stream, peer: RemotePeer) => Promise<void>

interface Registration {
  protocol: string
  handler: PeerStreamHandler
  options: HandleOptions
}

interface TableEntry {
  nodeID: string
  peerId: PeerId
  type: PeerType
  record: CapabilityRecord
  ptnIDs: string[]
  latencyMs: number | null
  lastSeen: number
  missed: number
}

// Codes of a ProtocolError that only a broken or hostile peer causes; a timeout or a cut stream can be the network's.
const HOSTILE_CODES = new Set<ProtocolError['code']>(['too_large', 'malformed', 'invalid', 'bad_signature', 'wrong_signer'])

/**
 * The node's presence on the peer network: owns the libp2p host, switches WAN (relay) and LAN (mDNS cluster) on and
 * off as the settings change, keeps the table of peers with their signed capability records, and gives the other
 * domains their way to the peers: `handle` a protocol, `open` a stream to a peer by nodeID.
 */
export class PeerNetwork extends EventEmitter<PeerNetworkEvents> {
  readonly #identity: NodeIdentity
  readonly #settings: PeerNetworkDeps['settings']
  readonly #log: Logger
  readonly #name: string
  readonly #hardware: HardwareInfo
  readonly #engine: PeerNetworkDeps['engine']
  readonly #providers: CapabilityProviders
  readonly #options: Required<Omit<PeerNetworkOptions, 'wan'>> & { wan: PeerNetworkOptions['wan'] }
  readonly #registrations = new Map<string, Registration>()
  readonly #table = new Map<string, TableEntry>()
  /** nodeIDs that proved the cluster passcode on their current connection. */
  readonly #lanAdmitted = new Set<string>()
  /** nodeIDs whose record fetch is under way (no second one at once). */
  readonly #fetching = new Set<string>()
  /** Connected nodes that do not speak our capabilities protocol (the relay, foreign libp2p nodes), until they reconnect. */
  readonly #foreign = new Set<string>()
  readonly #banned = new Map<string, number>()
  /** Decaying count of requests per model this node could not serve: { score, at (unix ms of the score) }. */
  readonly #demand = new Map<string, { score: number, at: number }>()
  /** nodeIDs found by mDNS whose handshake is under way. */
  readonly #joining = new Set<string>()
  #host: PeerHost | null = null
  #wan: WanClient | null = null
  #wanUrl: string | null = null
  #clusterOn = false
  #clusterKey: Promise<Buffer> | null = null
  #clusterPasscode: string | null = null
  #shutdown: AbortController | null = null
  #heartbeat: Promise<void> | null = null
  /** Setting changes are applied one after another, in order. */
  #reconfiguring: Promise<void> = Promise.resolve()
  #unsubscribe: (() => void) | null = null
  /** While networking is off: stops watching the settings for it to be switched on. */
  #waiting: (() => void) | null = null
  /** A host start under way, set off by a settings change. */
  #starting: Promise<void> | null = null

  constructor (deps: PeerNetworkDeps, options: PeerNetworkOptions = {}) {
    super()
    this.#identity = deps.identity
    this.#settings = deps.settings
    this.#log = deps.log
    this.#name = deps.name ?? `meshnode-${deps.identity.nodeID.slice(0, 8)}`
    this.#hardware = deps.hardware ?? detectHardware()
    this.#engine = deps.engine
    this.#providers = deps.providers ?? {}
    this.#options = {
      listen: options.listen ?? DEFAULT_LISTEN,
      lanListen: options.lanListen ?? DEFAULT_LAN_LISTEN,
      heartbeatIntervalMs: options.heartbeatIntervalMs ?? 10_000,
      degradedLatencyMs: options.degradedLatencyMs ?? 2_000,
      deadAfterMissed: options.deadAfterMissed ?? 3,
      banMs: options.banMs ?? 600_000,
      mdnsQueryIntervalMs: options.mdnsQueryIntervalMs ?? 10_000,
      wan: options.wan
    }
  }

  get nodeID (): string {
    return this.#identity.nodeID
  }

  /** The libp2p host, once started. For tests and the bench; domains use `handle` and `open`. */
  get host (): PeerHost {
    if (this.#host == null) throw new UnavailableError('The peer network is not started')
    return this.#host
  }

  /** The multiaddrs this node listens on (with its peer id). */
  addresses (): string[] {
    return this.#host?.getMultiaddrs().map(String) ?? []
  }

  /** Whether the WAN client holds a connection to the relay. */
  get relayConnected (): boolean {
    return this.#wan?.relayConnected ?? false
  }

  /**
   * Starts the libp2p host once WAN or the LAN cluster is on, now or when a setting switches one on: a node with
   * networking off has nobody to talk to, and does not load libp2p or listen on any port for it. Protocols registered
   * with `handle` before that are served as soon as the host starts.
   */
  async start (): Promise<void> {
    if (this.#host != null || this.#waiting != null || this.#starting != null) return
    if (networkWanted(this.#settings.get())) {
      await this.#startHost()
      return
    }
    this.#waiting = this.#settings.onChange(({ current }) => {
      if (!networkWanted(current) || this.#starting != null) return
      this.#waiting?.()
      this.#waiting = null
      this.#starting = this.#startHost()
        .catch((err: unknown) => { this.#log.error({ err }, 'the peer network could not start') })
        .finally(() => { this.#starting = null })
    })
  }

  async #startHost (): Promise<void> {
    const shutdown = new AbortController()
    this.#shutdown = shutdown
    // libp2p and its transports load here, the first time the network starts, not with the node.
    const { createPeerHost } = await import('./libp2p-node.ts')
    const host = await createPeerHost(this.#identity, {
      listen: this.#options.listen,
      relayReservations: true,
      lan: { queryIntervalMs: this.#options.mdnsQueryIntervalMs },
      denyPeer: (peer) => this.#isBanned(peer),
      log: this.#log
    })
    this.#host = host
    try {
      await handleProtocol(host, CAPABILITIES_PROTOCOL, this.#guard(CAPABILITIES_PROTOCOL, createCapabilitiesHandler(() => this.#signedRecord()), {}), { maxInboundStreams: MAX_INBOUND_CAPABILITIES_STREAMS })
      const cluster = createClusterHandler({
        key: async () => this.#clusterOn && this.#clusterKey != null ? await this.#clusterKey : null,
        localNodeID: this.#identity.nodeID,
        admit: (nodeID) => { this.#admitLan(nodeID) }
      })
      await handleProtocol(host, CLUSTER_PROTOCOL, this.#guard(CLUSTER_PROTOCOL, async (stream, peer) => {
        const admitted = await cluster(stream, peer.nodeID)
        if (!admitted) await this.#hangUpIfStranger(peer.nodeID, 'cluster handshake failed')
      }, { allowStrangers: true }), { maxInboundStreams: MAX_INBOUND_CLUSTER_STREAMS })
      for (const registration of this.#registrations.values()) await this.#register(host, registration)
      host.addEventListener('peer:connect', this.#onConnect)
      host.addEventListener('peer:disconnect', this.#onDisconnect)
      this.#unsubscribe = this.#settings.onChange((change) => { this.#reconfigure(change.current) })
      this.#reconfigure(this.#settings.get())
      await this.#reconfiguring
      this.#heartbeat = this.#runHeartbeat(shutdown.signal)
    } catch (err) {
      await this.stop()
      throw err
    }
  }

  async stop (): Promise<void> {
    this.#waiting?.()
    this.#waiting = null
    await this.#starting
    const host = this.#host
    if (host == null) return
    this.#unsubscribe?.()
    this.#unsubscribe = null
    this.#shutdown?.abort()
    await this.#heartbeat
    await this.#reconfiguring
    this.#heartbeat = null
    host.removeEventListener('peer:connect', this.#onConnect)
    host.removeEventListener('peer:disconnect', this.#onDisconnect)
    try {
      await this.#wan?.stop()
    } finally {
      this.#wan = null
      this.#wanUrl = null
      this.#clusterOn = false
      this.#host = null
      await host.stop()
      for (const nodeID of [...this.#table.keys()]) this.#drop(nodeID)
      this.#lanAdmitted.clear()
    }
  }

  /**
   * Registers a protocol handler. Before `start` it is kept and registered when the host starts. Streams from nodes
   * that are not admitted peers are refused unless `allowStrangers`; a handler that throws costs the stream, and a
   * `ProtocolError` of a malformed, oversized or forged message also costs the peer its connection (and a ban).
   */
  async handle (protocol: string, handler: PeerStreamHandler, options: HandleOptions): Promise<void> {
    if (this.#registrations.has(protocol)) throw new Error(`Protocol ${protocol} is already handled`)
    const registration: Registration = { protocol, handler, options }
    this.#registrations.set(protocol, registration)
    if (this.#host != null) await this.#register(this.#host, registration)
  }

  /**
   * Opens a stream to a peer by nodeID, on the connection we hold (direct or relayed) or a new one. Throws
   * `NotFoundError` for a node that is not a peer, `UnavailableError` when it cannot be reached.
   */
  async open (nodeID: string, protocol: string, options: { signal?: AbortSignal } = {}): Promise<Stream> {
    const host = this.#host
    if (host == null) throw new UnavailableError('The peer network is not started')
    if (!this.#table.has(nodeID) && this.#admission(nodeID) == null) throw new NotFoundError(`Unknown peer: ${nodeID}`)
    try {
      return await openStream(host, nodeIDToPeerId(nodeID), protocol, options)
    } catch (err) {
      if (options.signal?.aborted === true) throw options.signal.reason
      throw new UnavailableError(`Peer ${nodeID} is unreachable: ${(err as Error).message}`, { cause: err })
    }
  }

  /** Whether `nodeID` is refused for now, after sending a malformed, oversized or forged message. */
  isBanned (nodeID: string): boolean {
    return this.#isBannedID(nodeID)
  }

  /** Whether `nodeID` is in the peer table (connected, its record verified). */
  isKnownPeer (nodeID: string): boolean {
    return this.#table.has(nodeID)
  }

  peer (nodeID: string): PeerInfo | null {
    const entry = this.#table.get(nodeID)
    return entry == null ? null : this.#info(entry)
  }

  /** The peer table, most recently seen first. */
  peers (): PeerInfo[] {
    return [...this.#table.values()].map(entry => this.#info(entry)).sort((a, b) => b.lastSeen - a.lastSeen)
  }

  counts (): { lan: number, wan: number } {
    let lan = 0
    let wan = 0
    for (const entry of this.#table.values()) {
      if (entry.type === 'lan') lan++
      else wan++
    }
    return { lan, wan }
  }

  /**
   * Reports a peer that answered one of our requests with a malformed, oversized or forged message: it is logged,
   * disconnected and refused for a while. Errors of other kinds (timeouts, resets) are not its fault and are ignored.
   */
  async reportMisbehaviour (nodeID: string, err: unknown): Promise<void> {
    if (!(err instanceof ProtocolError) || !HOSTILE_CODES.has(err.code)) return
    this.#log.warn({ nodeID, code: err.code, reason: err.message }, 'peer sent a malformed, oversized or forged message; disconnecting it')
    this.#banned.set(nodeID, Date.now() + this.#options.banMs)
    this.#drop(nodeID)
    this.#lanAdmitted.delete(nodeID)
    const host = this.#host
    if (host == null) return
    try {
      await host.hangUp(nodeIDToPeerId(nodeID))
    } catch (hangUpErr) {
      // The connection may already be gone; the ban keeps it from coming back either way.
      this.#log.debug({ err: hangUpErr, nodeID }, 'hang-up of a misbehaving peer failed')
    }
  }

  /**
   * Counts a request for a model this node could not serve, its own or a peer's (issue 4 item 6). The count decays
   * with a half-life of DEMAND_HALF_LIFE_MS, so demand describes the last hour or so, not all time. Advertised to peers.
   */
  recordDemand (modelID: string, now: number = Date.now()): void {
    const current = this.#demand.get(modelID)
    this.#demand.set(modelID, { score: decayed(current, now) + 1, at: now })
    if (this.#demand.size > MAX_DEMAND_ENTRIES * 4) {
      // Keep the most demanded: a flood of made-up model ids must not grow this without bound.
      const kept = this.demand(now)
      this.#demand.clear()
      for (const { modelID: id, requests } of kept) this.#demand.set(id, { score: requests, at: now })
    }
  }

  /** Our own demand, most demanded first: models asked for here (or of us) that no one here could serve. */
  demand (now: number = Date.now()): Array<{ modelID: string, requests: number }> {
    const entries: Array<{ modelID: string, requests: number }> = []
    for (const [modelID, entry] of this.#demand) {
      const score = decayed(entry, now)
      if (score < 0.5) {
        this.#demand.delete(modelID)
        continue
      }
      entries.push({ modelID, requests: Math.max(1, Math.round(score)) })
    }
    return entries.sort((a, b) => b.requests - a.requests).slice(0, MAX_DEMAND_ENTRIES)
  }

  /** This node's current record, as peers receive it. */
  ownRecord (): CapabilityRecord {
    const stats = this.#engine?.stats() ?? { slots: 0, busySlots: 0, queued: 0 }
    const loaded = this.#engine?.loaded()?.modelID ?? null
    const models = this.#providers.models?.() ?? { loaded, downloaded: loaded == null ? [] : [loaded] }
    const reservation = this.#settings.get().org_capacity_reservation
    return {
      nodeID: this.#identity.nodeID,
      name: this.#name,
      models: { loaded: models.loaded, downloaded: models.downloaded.slice(0, 256) },
      capacity: { ...stats, reservedSlots: stats.slots - publicSlots(stats.slots, reservation) },
      pricePer1kTokensMicro: this.#providers.pricePer1kTokensMicro?.() ?? 0,
      hardware: { ...this.#hardware },
      ptnCertificates: this.#providers.ptnCertificates?.() ?? [],
      agent: this.#providers.agentProfile?.() ?? null,
      demand: this.demand(),
      timestamp: Date.now()
    }
  }

  #signedRecord (): ReturnType<typeof signCapabilities> {
    return signCapabilities(this.#identity, this.ownRecord())
  }

  #info (entry: TableEntry): PeerInfo {
    const healthy = entry.missed === 0 && (entry.latencyMs == null || entry.latencyMs <= this.#options.degradedLatencyMs)
    return {
      nodeID: entry.nodeID,
      type: entry.type,
      status: healthy ? 'online' : 'degraded',
      latencyMs: entry.latencyMs,
      lastSeen: entry.lastSeen,
      record: entry.record,
      ptnIDs: [...entry.ptnIDs]
    }
  }

  // ---- admission ----------------------------------------------------------------------------------------------

  /** How `nodeID` may talk to us now: as a LAN cluster member, as a WAN peer (WAN on), or not at all. */
  #admission (nodeID: string): PeerType | null {
    if (this.#isBannedID(nodeID) || nodeID === this.#identity.nodeID) return null
    if (this.#clusterOn && this.#lanAdmitted.has(nodeID)) return 'lan'
    if (this.#wan != null && nodeID !== this.#relayNodeID()) return 'wan'
    return null
  }

  #relayNodeID (): string | null {
    const relay = this.#wan?.relayPeerId
    if (relay == null) return null
    try {
      return peerIdToNodeID(relay)
    } catch (err) {
      // A relay with a non-Ed25519 key has no nodeID; it can be no peer's either.
      if (err instanceof ProtocolError) return null
      throw err
    }
  }

  #isBannedID (nodeID: string): boolean {
    const until = this.#banned.get(nodeID)
    if (until == null) return false
    if (until > Date.now()) return true
    this.#banned.delete(nodeID)
    return false
  }

  #isBanned (peer: PeerId): boolean {
    if (peer.type !== 'Ed25519') return false
    return this.#isBannedID(Buffer.from(peer.publicKey.raw).toString('hex'))
  }

  #admitLan (nodeID: string): void {
    if (!this.#clusterOn || this.#lanAdmitted.has(nodeID)) return
    this.#lanAdmitted.add(nodeID)
    this.#log.info({ nodeID }, 'LAN cluster peer admitted')
    const entry = this.#table.get(nodeID)
    if (entry != null && entry.type !== 'lan') {
      entry.type = 'lan'
      this.#emitSafely('peer:updated', this.#info(entry))
    }
    this.#consider(nodeID)
  }

  /** Hangs up on a node that is no admitted peer (a failed handshake); an admitted one keeps its connection. */
  async #hangUpIfStranger (nodeID: string, why: string): Promise<void> {
    if (this.#admission(nodeID) != null || this.#host == null) return
    this.#log.info({ nodeID, why }, 'disconnecting a node that is not a peer')
    await this.#host.hangUp(nodeIDToPeerId(nodeID))
  }

  // ---- protocols --------------------------------------------------------------------------------------------------

  async #register (host: PeerHost, registration: Registration): Promise<void> {
    await handleProtocol(host, registration.protocol, this.#guard(registration.protocol, registration.handler, registration.options), { maxInboundStreams: registration.options.maxInboundStreams })
  }

  /** Wraps a handler: who may open the stream, and what a failure costs. Nothing a peer sends escapes as a crash. */
  #guard (protocol: string, handler: PeerStreamHandler, options: Pick<HandleOptions, 'allowStrangers'>): (stream: Stream, connection: Connection) => Promise<void> {
    return async (stream, connection) => {
      let nodeID: string
      try {
        nodeID = peerIdToNodeID(connection.remotePeer)
      } catch (err) {
        // Not an Ed25519 key: no meshnode node.
        stream.abort(err instanceof Error ? err : new Error(String(err)))
        return
      }
      if (options.allowStrangers !== true && this.#admission(nodeID) == null) {
        this.#log.debug({ nodeID, protocol }, 'stream from a node that is not a peer refused')
        stream.abort(new ProtocolError(`${nodeID} is not a peer of this node`, 'refused'))
        return
      }
      try {
        await handler(stream, { nodeID, connection })
      } catch (err) {
        this.#log.debug({ err, nodeID, protocol }, 'inbound stream failed')
        stream.abort(err instanceof Error ? err : new Error(String(err)))
        await this.reportMisbehaviour(nodeID, err)
      }
    }
  }

  // ---- the peer table ---------------------------------------------------------------------------------------------

  readonly #onConnect = (evt: CustomEvent<PeerId>): void => {
    let nodeID: string
    try {
      nodeID = peerIdToNodeID(evt.detail)
    } catch (err) {
      if (err instanceof ProtocolError) return   // not a meshnode node
      throw err
    }
    this.#consider(nodeID)
  }

  readonly #onDisconnect = (evt: CustomEvent<PeerId>): void => {
    let nodeID: string
    try {
      nodeID = peerIdToNodeID(evt.detail)
    } catch (err) {
      if (err instanceof ProtocolError) return
      throw err
    }
    if (this.#host?.getConnections(evt.detail).some(c => c.status === 'open') === true) return
    this.#lanAdmitted.delete(nodeID)
    this.#foreign.delete(nodeID)
    this.#drop(nodeID)
  }

  /** Fetches the record of a connected node that may be a peer, unless a fetch is under way. */
  #consider (nodeID: string): void {
    const signal = this.#shutdown?.signal
    if (signal == null || signal.aborted) return
    if (this.#table.has(nodeID) || this.#fetching.has(nodeID) || this.#foreign.has(nodeID)) return
    if (this.#admission(nodeID) == null) return
    this.#refresh(nodeID, signal).catch((err: unknown) => {
      this.#log.error({ err, nodeID }, 'peer record refresh failed unexpectedly')
    })
  }

  /** Fetches a record (and, for a known peer, pings it) and updates the table. Never throws for a peer's failure. */
  async #refresh (nodeID: string, signal: AbortSignal): Promise<void> {
    const host = this.#host
    if (host == null || this.#fetching.has(nodeID)) return
    this.#fetching.add(nodeID)
    const peerId = nodeIDToPeerId(nodeID)
    const deadline = AbortSignal.any([signal, AbortSignal.timeout(Math.max(this.#options.heartbeatIntervalMs, 5_000))])
    try {
      const [record, latencyMs] = await Promise.all([
        fetchCapabilities(host, peerId, nodeID, { signal: deadline }),
        host.services.ping.ping(peerId, { signal: deadline }).then(ms => ms, (err: unknown) => {
          // A peer without a ping answer still has a record; it is marked degraded below.
          this.#log.debug({ err, nodeID }, 'ping failed')
          return null
        })
      ])
      if (signal.aborted) return
      this.#accept(nodeID, peerId, record, latencyMs)
    } catch (err) {
      if (signal.aborted) return
      this.#failed(nodeID, err)
    } finally {
      this.#fetching.delete(nodeID)
    }
  }

  #accept (nodeID: string, peerId: PeerId, record: CapabilityRecord, latencyMs: number | null): void {
    const type = this.#admission(nodeID)
    if (type == null) {
      this.#drop(nodeID)   // de-admitted while the fetch ran (a setting turned off)
      return
    }
    const entry = this.#table.get(nodeID)
    if (entry != null && record.timestamp < entry.record.timestamp) {
      this.#log.warn({ nodeID }, 'peer sent a record older than the one we have; ignored')
      return
    }
    const ptnIDs = this.#verifyCertificates(nodeID, record.ptnCertificates)
    const now = Date.now()
    if (entry == null) {
      const added: TableEntry = { nodeID, peerId, type, record, ptnIDs, latencyMs, lastSeen: now, missed: latencyMs == null ? 1 : 0 }
      this.#table.set(nodeID, added)
      this.#log.info({ nodeID, name: record.name, type, model: record.models.loaded }, 'peer online')
      this.#emitSafely('peer:online', this.#info(added))
      return
    }
    entry.type = type
    entry.record = record
    entry.ptnIDs = ptnIDs
    entry.latencyMs = latencyMs ?? entry.latencyMs
    entry.lastSeen = now
    entry.missed = latencyMs == null ? entry.missed + 1 : 0
    this.#emitSafely('peer:updated', this.#info(entry))
  }

  #failed (nodeID: string, err: unknown): void {
    if (isUnsupportedProtocol(err)) {
      // The relay, or a libp2p node that is not meshnode: leave it alone until it reconnects.
      this.#foreign.add(nodeID)
      return
    }
    if (err instanceof ProtocolError && HOSTILE_CODES.has(err.code)) {
      this.reportMisbehaviour(nodeID, err).catch((reportErr: unknown) => { this.#log.error({ err: reportErr, nodeID }, 'disconnecting a misbehaving peer failed') })
      return
    }
    const entry = this.#table.get(nodeID)
    this.#log.debug({ err, nodeID }, 'peer heartbeat failed')
    if (entry == null) return   // not a peer yet: the next heartbeat tries again
    entry.missed++
    if (entry.missed >= this.#options.deadAfterMissed) {
      this.#log.info({ nodeID, missed: entry.missed }, 'peer missed its heartbeats; dropping it')
      this.#drop(nodeID)
      this.#host?.hangUp(entry.peerId).catch((hangUpErr: unknown) => { this.#log.debug({ err: hangUpErr, nodeID }, 'hang-up of a dead peer failed') })
      return
    }
    this.#emitSafely('peer:updated', this.#info(entry))
  }

  #verifyCertificates (nodeID: string, certificates: string[]): string[] {
    if (certificates.length === 0 || this.#providers.verifyPtnCertificates == null) return []
    try {
      return this.#providers.verifyPtnCertificates(nodeID, certificates)
    } catch (err) {
      // The verifier's bug must not keep a peer out of the table; it is only not counted as a PTN member.
      this.#log.error({ err, nodeID }, 'verifying peer PTN certificates failed')
      return []
    }
  }

  #drop (nodeID: string): void {
    if (!this.#table.delete(nodeID)) return
    this.#log.info({ nodeID }, 'peer offline')
    this.#emitSafely('peer:offline', nodeID)
  }

  async #runHeartbeat (signal: AbortSignal): Promise<void> {
    while (!signal.aborted) {
      try {
        await delay(this.#options.heartbeatIntervalMs, undefined, { signal, ref: false })
      } catch (err) {
        if (signal.aborted) return   // stop() ends the wait
        throw err
      }
      const host = this.#host
      if (host == null) return
      const candidates = new Set(this.#table.keys())
      for (const peerId of host.getPeers()) {
        try {
          candidates.add(peerIdToNodeID(peerId))
        } catch (err) {
          if (!(err instanceof ProtocolError)) throw err   // a peer with another key type is no meshnode node
        }
      }
      for (const nodeID of candidates) {
        if (this.#admission(nodeID) == null) {
          this.#drop(nodeID)
          continue
        }
        if (this.#foreign.has(nodeID)) continue
        // Not awaited one by one: a slow peer must not delay the others' heartbeats. #refresh never throws.
        this.#refresh(nodeID, signal).catch((err: unknown) => { this.#log.error({ err, nodeID }, 'peer refresh failed unexpectedly') })
      }
    }
  }

  // ---- settings -------------------------------------------------------------------------------------------------

  #reconfigure (settings: Settings): void {
    this.#reconfiguring = this.#reconfiguring.then(async () => {
      if (this.#host == null) return
      await this.#applyWan(settings)
      await this.#applyCluster(settings)
    }).catch((err: unknown) => {
      this.#log.error({ err }, 'applying network settings failed')
    })
  }

  async #applyWan (settings: Settings): Promise<void> {
    const host = this.#host
    if (host == null) return
    const url = settings.wan_enabled && settings.wan_relay_url !== '' ? settings.wan_relay_url : null
    if (url === this.#wanUrl) return
    const previous = this.#wan
    this.#wan = null
    this.#wanUrl = null
    if (previous != null) {
      const relay = previous.relayPeerId
      await previous.stop()
      // Forget the relay, or libp2p's relay discovery would dial it again to restore the reservation.
      if (relay != null) await host.peerStore.delete(relay)
      await this.#dropStrangers('WAN turned off or relay changed')
      this.#log.info('WAN stopped')
    }
    if (url == null) return
    const wan = new WanClient({ host, identity: this.#identity, log: this.#log.child({ part: 'wan' }) }, { ...this.#options.wan, relayUrl: url })
    wan.on('peer:discovered', (nodeID) => { this.#consider(nodeID) })
    this.#wan = wan
    this.#wanUrl = url
    await wan.start()
    this.#log.info({ relayUrl: url }, 'WAN started')
  }

  async #applyCluster (settings: Settings): Promise<void> {
    const host = this.#host
    if (host == null) return
    const on = settings.cluster_enabled
    const passcodeChanged = this.#clusterPasscode !== settings.cluster_passcode
    if (on === this.#clusterOn && !(on && passcodeChanged)) return
    if (this.#clusterOn) {
      // Off, or a new passcode: every member must prove the new one, so the cluster starts over.
      this.#clusterOn = false
      this.#clusterKey = null
      this.#clusterPasscode = null
      await host.services.lanPresence.disable()
      this.#lanAdmitted.clear()
      await this.#dropStrangers('LAN cluster turned off or passcode changed')
      this.#log.info('LAN cluster stopped')
    }
    if (!on) return
    this.#clusterPasscode = settings.cluster_passcode
    this.#clusterKey = deriveClusterKey(settings.cluster_passcode)
    await this.#clusterKey
    this.#clusterOn = true
    await host.services.lanPresence.enable(this.#options.lanListen, (found) => { this.#onLanPeer(found) })
    this.#log.info({ passcode: settings.cluster_passcode !== '' }, 'LAN cluster started')
  }

  /** Drops from the table, and hangs up on, every node no longer admitted. */
  async #dropStrangers (why: string): Promise<void> {
    const host = this.#host
    if (host == null) return
    for (const nodeID of [...this.#table.keys()]) {
      if (this.#admission(nodeID) == null) this.#drop(nodeID)
    }
    for (const peerId of host.getPeers()) {
      let nodeID: string
      try {
        nodeID = peerIdToNodeID(peerId)
      } catch (err) {
        if (err instanceof ProtocolError) continue
        throw err
      }
      if (this.#admission(nodeID) != null) continue
      this.#log.debug({ nodeID, why }, 'hanging up on a node that is no longer a peer')
      try {
        await host.hangUp(peerId)
      } catch (err) {
        // Already closing; nothing else to do.
        this.#log.debug({ err, nodeID }, 'hang-up failed')
      }
    }
  }

  /** mDNS found a meshnode node: connect and prove the passcode (the other side proves it to us at the same time). */
  #onLanPeer (found: Libp2pPeerInfo): void {
    let nodeID: string
    try {
      nodeID = peerIdToNodeID(found.id)
    } catch (err) {
      if (err instanceof ProtocolError) return
      throw err
    }
    const signal = this.#shutdown?.signal
    const host = this.#host
    const key = this.#clusterKey
    if (signal == null || signal.aborted || host == null || key == null) return
    if (nodeID === this.#identity.nodeID || this.#lanAdmitted.has(nodeID) || this.#isBannedID(nodeID)) return
    this.#joinLan(host, nodeID, found, key, signal).catch((err: unknown) => {
      this.#log.error({ err, nodeID }, 'LAN handshake failed unexpectedly')
    })
  }

  async #joinLan (host: PeerHost, nodeID: string, found: Libp2pPeerInfo, key: Promise<Buffer>, signal: AbortSignal): Promise<void> {
    if (this.#joining.has(nodeID)) return
    this.#joining.add(nodeID)
    const deadline = AbortSignal.any([signal, AbortSignal.timeout(15_000)])
    try {
      if (host.getConnections(found.id).length === 0) {
        await host.dial(found.multiaddrs.map(ma => ma.encapsulate(`/p2p/${found.id.toString()}`)), { signal: deadline })
      }
      await joinCluster(host, found.id, { key: await key, localNodeID: this.#identity.nodeID, remoteNodeID: nodeID, signal: deadline })
      if (key !== this.#clusterKey) return   // the passcode changed meanwhile; the new one must be proven
      this.#admitLan(nodeID)
    } catch (err) {
      if (signal.aborted) return
      this.#log.info({ nodeID, reason: (err as Error).message }, 'LAN node not admitted to the cluster')
      await this.#hangUpIfStranger(nodeID, 'cluster handshake failed')
    } finally {
      this.#joining.delete(nodeID)
    }
  }

  #emitSafely<K extends keyof PeerNetworkEvents> (event: K, ...args: PeerNetworkEvents[K]): void {
    try {
      (this.emit as (event: K, ...args: PeerNetworkEvents[K]) => boolean)(event, ...args)
    } catch (err) {
      // A listener's bug must not break the peer table.
      this.#log.error({ err, event }, 'PeerNetwork event listener threw')
    }
  }
}

/** Demand counted an hour ago weighs a quarter of demand counted now. */
export const DEMAND_HALF_LIFE_MS = 30 * 60_000

function decayed (entry: { score: number, at: number } | undefined, now: number): number {
  if (entry == null) return 0
  return entry.score * 0.5 ** (Math.max(0, now - entry.at) / DEMAND_HALF_LIFE_MS)
}

/** Whether the settings ask for any peer networking: the relay (WAN) or the LAN cluster. */
function networkWanted (settings: Settings): boolean {
  return settings.wan_enabled || settings.cluster_enabled
}

function isUnsupportedProtocol (err: unknown): boolean {
  // Matched by name: libp2p's errors may come from more than one copy of @libp2p/interface.
  return err instanceof Error && (err.name === 'UnsupportedProtocolError' || err.name === 'ProtocolNegotiationError' || /protocol selection failed/i.test(err.message))
}
