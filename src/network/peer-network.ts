// Over 400 lines because it is the composition of the network's parts (like js-libp2p's createLibp2p): each part is
// its own file; what remains here is their wiring, and splitting it would scatter the one place that shows how they fit.
import { EventEmitter } from 'node:events'
import type { PeerId, Stream } from '@libp2p/interface'
import type { Logger } from 'pino'
import { NotFoundError, UnavailableError, errorText } from '../errors.ts'
import type { NodeIdentity } from '../identity/index.ts'
import { relayUrls, type Settings, type SettingsChange } from '../settings/index.ts'
import { detectHardware, type HardwareInfo } from '../system/hardware.ts'
import { ProtocolError, openPeerStream, type PeerStreams, type SignedEnvelope } from '../wire/index.ts'
import { Admission, type PeerType } from './peers/admission.ts'
import { AdvertGossip, type AdvertGossipOptions } from './adverts/advert-gossip.ts'
import { ADVERTS_SYNC_PROTOCOL, AdvertBook, MAX_INBOUND_SYNC_STREAMS, createAdvertsSyncHandler, signAdvert, type AdvertEntry } from './adverts/adverts.ts'
import { ConnectionPolicy } from './peers/connection-policy.ts'
import { CAPABILITIES_PROTOCOL, MAX_INBOUND_CAPABILITIES_STREAMS, createCapabilitiesHandler, pushCapabilities, type CapabilityRecord } from './peers/capabilities.ts'
import { advertisedAddrs } from './relay/directory.ts'
import { LanCluster } from './lan/lan-cluster.ts'
import type { PeerHost } from './host/libp2p-node.ts'
import { DEFAULT_LAN_LISTEN, DEFAULT_LISTEN, nodeIDToPeerId, openStream, peerIdToNodeID } from './host/peer-ids.ts'
import { PeerTable, type PeerInfo, type PeerTableEvents } from './peers/peer-table.ts'
import { ProtocolRegistry, type HandleOptions, type PeerStreamHandler } from './peers/protocol-registry.ts'
import type { ReachabilityStatus } from './host/reachability-status.ts'
import { RecordAdvertiser, type RecordPart, type RecordParts } from './peers/record-advertiser.ts'
import { WanPresence } from './wan/wan-presence.ts'
import { dialableAddrs, type WanClientOptions } from './wan/wan.ts'

export interface PeerNetworkDeps {
  identity: NodeIdentity
  settings: { get (): Settings, onChange (listener: (change: SettingsChange) => void): () => void }
  log: Logger
  /** Advertised to peers. @default `meshnode-<first 8 of nodeID>` */
  name?: string
  /** Advertised to peers. @default detected */
  hardware?: HardwareInfo
}

export interface PeerNetworkOptions {
  /** libp2p listen addresses. @default loopback TCP and WebSocket on free ports */
  listen?: string[]
  /** Listened on while `cluster_enabled` is on. @default every interface, TCP, a free port */
  lanListen?: string[]
  /** How often libp2p pings every connection: the peers' latency, and a connection whose ping fails is closed. @default CONNECTION_PING_INTERVAL_MS */
  pingIntervalMs?: number
  /** Round trip above which a peer is `degraded`. @default 2_000 */
  degradedLatencyMs?: number
  /** How long a peer that sent a malformed, oversized or forged message stays refused. @default 600_000 */
  banMs?: number
  /**
   * How often every part of this node's record is read again though no change was announced (`recordChanged`): the
   * safety net for what changes with time alone. @default 30_000
   */
  recordCheckMs?: number
  /** A change of this node's load alone is pushed at most this often. @default 5_000 */
  loadPushIntervalMs?: number
  /** Connections held at most: relays, PTN peers and peers in use are kept first. @default 50 */
  maxConnections?: number
  /** Nodes listed by a relay that this node connects to of its own accord; the others are reached on demand. @default 8 */
  targetPeers?: number
  /** New direct inbound connections per second from one IP address (many nodes on one machine: raise it; relayed ones are not counted). @default 5 */
  inboundConnectionsPerSecond?: number
  /** Tunables of advert gossip (refresh, debounce) and how long an advert lives. */
  adverts?: AdvertGossipOptions & { ttlMs?: number }
  /** Tunables of the WAN client (sync interval, backoff). */
  wan?: Omit<WanClientOptions, 'relayUrl'>
  /** mDNS query interval. @default 10_000 */
  mdnsQueryIntervalMs?: number
}

/**
 * The node's presence on the peer network, composed of parts the way js-libp2p composes services, each with its own
 * deps and job: the libp2p host (started only once WAN or the LAN cluster is on), `Admission` (who may be a peer:
 * bans, the passcode cluster, WAN; which PTNs a peer's certificates prove), the `ProtocolRegistry` (the guard in front
 * of every protocol), the `PeerTable` (peers and their records, latency from libp2p's connection monitor), the
 * `RecordAdvertiser` (this node's record, contributed to by other domains, pushed when it changes), and LAN and WAN
 * presence. Other domains `handle` protocols, `open` streams to peers by nodeID, and read the table.
 */
export class PeerNetwork extends EventEmitter<PeerTableEvents> {
  readonly #identity: NodeIdentity
  readonly #settings: PeerNetworkDeps['settings']
  readonly #log: Logger
  readonly #options: PeerNetworkOptions
  readonly #admission: Admission
  readonly #registry: ProtocolRegistry
  readonly #table: PeerTable
  readonly #records: RecordAdvertiser
  readonly #lan: LanCluster
  readonly #wan: WanPresence
  readonly #policy: ConnectionPolicy
  readonly #book: AdvertBook
  readonly #gossip: AdvertGossip
  #host: PeerHost | null = null
  /**
   * Streams the network's own upkeep opens to connected peers (a record push, an advert sync): unlike `open`, they do
   * not mark the peer as in use, or every peer would be worth keeping and a node reaching a full one on demand would
   * be the one turned away.
   */
  readonly #upkeep: PeerStreams = {
    open: async (nodeID, protocol, options) => await openStream(this.host, nodeIDToPeerId(nodeID), protocol, options),
    reportMisbehaviour: async (nodeID, err) => { await this.reportMisbehaviour(nodeID, err) }
  }

  /** Setting changes are applied one after another, in order. */
  #reconfiguring: Promise<void> = Promise.resolve()
  #unsubscribe: (() => void) | null = null
  /** While networking is off: stops watching the settings for it to be switched on. */
  #waiting: (() => void) | null = null
  /** A host start under way, set off by a settings change. */
  #starting: Promise<void> | null = null
  #ownProtocolsRegistered = false

  constructor (deps: PeerNetworkDeps, options: PeerNetworkOptions = {}) {
    super()
    this.#identity = deps.identity
    this.#settings = deps.settings
    this.#log = deps.log
    this.#options = options
    const self = deps.identity.nodeID
    this.#admission = new Admission({ self, log: deps.log }, { banMs: options.banMs })
    this.#registry = new ProtocolRegistry({ admission: this.#admission, failed: async (nodeID, err) => { await this.reportMisbehaviour(nodeID, err) }, log: deps.log })
    this.#table = new PeerTable({
      admission: this.#admission,
      openStream: async (nodeID, protocol, { signal }) => await openStream(this.host, nodeIDToPeerId(nodeID), protocol, { signal }),
      ping: async (nodeID, { signal }) => await this.host.services.ping.ping(nodeIDToPeerId(nodeID), { signal }),
      connections: (nodeID) => this.#host?.getConnections(nodeIDToPeerId(nodeID)).filter(c => c.status === 'open') ?? [],
      misbehaved: async (nodeID, err) => { await this.reportMisbehaviour(nodeID, err) },
      log: deps.log
    }, { degradedLatencyMs: options.degradedLatencyMs })
    this.#records = new RecordAdvertiser({
      identity: deps.identity,
      name: deps.name ?? `meshnode-${self.slice(0, 8)}`,
      hardware: deps.hardware ?? detectHardware(),
      peers: () => this.#table.nodeIDs(),
      push: async (nodeID, envelope, { signal }) => { await this.#push(nodeID, envelope, signal) },
      changed: (loadOnly) => { if (!loadOnly) this.#gossip.publishSoon() },
      log: deps.log
    }, { checkIntervalMs: options.recordCheckMs, loadPushIntervalMs: options.loadPushIntervalMs })
    this.#lan = new LanCluster({
      self, admission: this.#admission, registry: this.#registry, hangUpIfStranger: async (nodeID, why) => { await this.#hangUpIfStranger(nodeID, why) }, log: deps.log
    }, { listen: options.lanListen ?? DEFAULT_LAN_LISTEN })
    this.#book = new AdvertBook(self, { ttlMs: options.adverts?.ttlMs })
    this.#gossip = new AdvertGossip({
      identity: deps.identity,
      book: this.#book,
      record: () => this.#records.current(),
      addrs: () => (this.#host == null ? [] : advertisedAddrs(this.#host)),
      peers: this.#upkeep,
      connected: () => this.#table.nodeIDs(),
      log: deps.log
    }, options.adverts)
    // A node known by its advert is dialed on demand at the addresses it signed; its relays may serve us too.
    this.#book.on('advert', (entry) => {
      this.#remember(entry)
      if (this.#table.has(entry.nodeID)) this.#table.received(entry.nodeID, entry.record)   // a newer record by gossip
      // Its certificates are verified as it is taken, once: the PTN domain remembers what the record's list proves,
      // so `peers()`, asked on every routed request, finds them verified instead of checking them all again.
      else this.#admission.ptnIDsOf(entry.nodeID, entry.record.ptnCertificates)
    })
    this.#policy = new ConnectionPolicy({ log: deps.log }, { maxConnections: options.maxConnections, targetPeers: options.targetPeers })
    this.#wan = new WanPresence({
      identity: deps.identity,
      admission: this.#admission,
      discovered: (nodeID) => { this.#table.consider(nodeID) },
      dialBudget: () => this.#policy.dialBudget(),
      relayConnected: (relayPeer) => { this.#policy.relay(relayPeer) },
      log: deps.log
    }, options.wan)

    for (const event of ['peer:online', 'peer:updated', 'peer:offline'] as const) {
      this.#table.on(event, (...args: unknown[]) => { (this.emit as (event: string, ...args: unknown[]) => boolean)(event, ...args) })
    }
    // A new peer may have fetched our record just before it changed: it gets the current one.
    this.#table.on('peer:online', (peer) => {
      this.#records.pushTo(peer.nodeID)
      this.#gossip.peerOnline(peer.nodeID)
    })
    // PTN peers are the last connections closed when the limit is reached.
    for (const event of ['peer:online', 'peer:updated'] as const) {
      this.#table.on(event, (peer) => { this.#policy.ptnPeer(peer.nodeID, this.#sharesPtn(peer.ptnIDs)) })
    }
    this.#admission.on('changed', () => { this.#admissionChanged() })
    this.#admission.on('lan:admitted', (nodeID) => {
      this.#table.recheck()   // a WAN peer found on the LAN becomes a LAN peer
      this.#table.consider(nodeID)
    })
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

  /** What AutoNAT learned of this node's reachability (`unknown` while the peer network is off). */
  reachability (): ReachabilityStatus {
    return this.#host?.services.reachability.status() ?? { reachability: 'unknown', publicAddrs: [] }
  }

  /** Whether a WAN client holds a connection to a relay. */
  get relayConnected (): boolean {
    return this.#wan.relayConnected
  }

  /** The relays a WAN client is connected to, by peer id. */
  connectedRelays (): string[] {
    return this.#wan.connectedRelays()
  }

  /** Connections held at most. */
  get maxConnections (): number {
    return this.#policy.maxConnections
  }

  /**
   * A domain's part of this node's capability record (models, load, price, PTN certificates, agent, demand), read now
   * and again whenever `recordChanged` names it.
   */
  advertise<K extends RecordPart> (part: K, value: () => RecordParts[K]): void {
    this.#records.contribute(part, value)
  }

  /** What these parts of this node's record are made of changed: they are read again, and a change goes to the peers. */
  recordChanged (...parts: RecordPart[]): void {
    this.#records.changed(...parts)
  }

  /** Trusts the PTN domain to say which PTNs a peer's certificates prove (see `Admission.trustPtnCertificates`). */
  trustPtnCertificates (verify: (nodeID: string, certificates: string[]) => string[]): void {
    this.#admission.trustPtnCertificates(verify)
  }

  /** This node's current record, as peers receive it. */
  ownRecord (): CapabilityRecord {
    return this.#records.current().body
  }

  /**
   * Starts the libp2p host once WAN or the LAN cluster is on, now or when a setting switches one on: a node with
   * networking off has nobody to talk to, and does not load libp2p or listen on any port for it. Protocols registered
   * with `handle` before that are served as soon as it starts.
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
    // libp2p and its transports load here, the first time the network starts, not with the node.
    const { createPeerHost } = await import('./host/libp2p-node.ts')
    await this.#registerOwnProtocols()
    const host = await createPeerHost(this.#identity, {
      listen: this.#options.listen ?? DEFAULT_LISTEN,
      relayReservations: true,
      lan: { queryIntervalMs: this.#options.mdnsQueryIntervalMs ?? 10_000 },
      pingIntervalMs: this.#options.pingIntervalMs,
      maxConnections: this.#policy.hostMaxConnections,
      inboundConnectionsPerSecond: this.#options.inboundConnectionsPerSecond,
      denyPeer: this.#admission.denyPeer,
      log: this.#log
    })
    this.#host = host
    this.#policy.attach(host)
    try {
      this.#table.start()
      this.#lan.attach(host)
      this.#wan.attach(host)
      await this.#registry.attach(host)
      host.addEventListener('peer:connect', this.#onConnect)
      host.addEventListener('peer:disconnect', this.#onDisconnect)
      host.addEventListener('self:peer:update', this.#onAddressesChanged)
      this.#gossip.start(host)
      this.#records.start()
      this.#unsubscribe = this.#settings.onChange((change) => { this.#reconfigure(change.current) })
      this.#reconfigure(this.#settings.get())
      await this.#reconfiguring
    } catch (err) {
      await this.stop()
      throw err
    }
  }

  /** The network's own protocols: the record (fetch and push) and the cluster handshake. */
  async #registerOwnProtocols (): Promise<void> {
    if (this.#ownProtocolsRegistered) return
    this.#ownProtocolsRegistered = true
    await this.#registry.handle(CAPABILITIES_PROTOCOL, createCapabilitiesHandler({
      current: () => this.#records.current(),
      received: (nodeID, record) => { this.#table.received(nodeID, record) }
    }), { maxInboundStreams: MAX_INBOUND_CAPABILITIES_STREAMS })
    await this.#registry.handle(ADVERTS_SYNC_PROTOCOL, createAdvertsSyncHandler({
      book: this.#book,
      own: () => signAdvert(this.#identity, this.#records.current(), (this.#host == null ? [] : advertisedAddrs(this.#host)))
    }), { maxInboundStreams: MAX_INBOUND_SYNC_STREAMS })
    await this.#lan.register()
  }

  async stop (): Promise<void> {
    this.#waiting?.()
    this.#waiting = null
    await this.#starting
    const host = this.#host
    if (host == null) return
    this.#unsubscribe?.()
    this.#unsubscribe = null
    await this.#reconfiguring
    this.#records.stop()
    try {
      await this.#gossip.leave()
    } catch (err) {
      this.#log.debug({ err }, 'saying goodbye by gossip failed')
    }
    await this.#gossip.stop()
    this.#book.clear()
    host.removeEventListener('peer:connect', this.#onConnect)
    host.removeEventListener('peer:disconnect', this.#onDisconnect)
    host.removeEventListener('self:peer:update', this.#onAddressesChanged)
    try {
      await this.#wan.stop()
      await this.#lan.stop()
    } finally {
      this.#registry.detach()
      this.#policy.attach(null)
      this.#host = null
      this.#admission.setCluster(false)
      await host.stop()
      this.#table.stop()
    }
  }

  /** Registers a protocol handler (see `ProtocolRegistry.handle`): served once the host runs, to admitted peers. */
  async handle (protocol: string, handler: PeerStreamHandler, options: HandleOptions): Promise<void> {
    await this.#registry.handle(protocol, handler, options)
  }

  /**
   * Opens a stream to a peer by nodeID, on the connection we hold (direct or relayed) or a new one. Throws
   * `NotFoundError` for a node that is not a peer, `UnavailableError` when it cannot be reached.
   */
  async open (nodeID: string, protocol: string | string[], options: { signal?: AbortSignal } = {}): Promise<Stream> {
    const host = this.#host
    if (host == null) throw new UnavailableError('The peer network is not started')
    if (!this.#table.has(nodeID) && this.#admission.typeOf(nodeID) == null) throw new NotFoundError(`Peer ${nodeID} is not connected (not in the peer table)`)
    try {
      await this.#policy.using(nodeID)
      const peerId = nodeIDToPeerId(nodeID)
      const advertised = host.getConnections(peerId).length === 0 ? this.#book.get(nodeID) : null
      if (advertised != null) await host.peerStore.merge(peerId, { multiaddrs: dialableAddrs(advertised.addrs, peerId) })
      return await openStream(host, peerId, protocol, options)
    } catch (err) {
      if (options.signal?.aborted === true) throw options.signal.reason
      // Known by its advert only and not reachable at its addresses: it is gone, or will say otherwise again.
      if (!this.#table.has(nodeID) && host.getConnections(nodeIDToPeerId(nodeID)).length === 0) this.#book.forget(nodeID)
      throw new UnavailableError(`Peer ${nodeID} is unreachable: ${errorText(err)}`, { cause: err })
    }
  }

  /** Whether `nodeID` is refused for now, after sending a malformed, oversized or forged message. */
  isBanned (nodeID: string): boolean {
    return this.#admission.isBanned(nodeID)
  }

  /** Whether `nodeID` is in the peer table (connected, its record verified). */
  isKnownPeer (nodeID: string): boolean {
    return this.#table.has(nodeID)
  }

  peer (nodeID: string): PeerInfo | null {
    return this.#table.peer(nodeID)
  }

  /**
   * The peers: those connected (the peer table, most recently heard from first), then the nodes known by their advert
   * only, most recently renewed first, which a request reaches on demand.
   */
  peers (): PeerInfo[] {
    const connected = this.#table.peers()
    const advertised: PeerInfo[] = []
    for (const entry of this.#book.list()) {
      if (this.#table.has(entry.nodeID)) continue
      const type = this.#admission.typeOf(entry.nodeID)
      if (type == null) continue
      advertised.push(advertisedPeer(entry, type, this.#admission.ptnIDsOf(entry.nodeID, entry.record.ptnCertificates)))
    }
    return [...connected, ...advertised]
  }

  /** Whether this node is still catching up on the adverts from before it joined, its first pull included (`AdvertGossip.joining`). */
  get joining (): boolean {
    return this.#gossip.joining
  }

  /** When an advert held here last changed (Unix ms; 0 when none is held): a pull reaches back `pullMs` plus
   *  ADVERT_PULL_WINDOW_MARGIN_MS from its start, so a network is idle once every node's is older than that. */
  get advertsChangedAt (): number {
    let newest = 0
    for (const entry of this.#book.list()) newest = Math.max(newest, entry.changedAt)
    return newest
  }

  /** Nodes known by their advert (connected or not). */
  get advertCount (): number {
    return this.#book.size
  }

  counts (): { lan: number, wan: number } {
    return this.#table.counts()
  }

  /**
   * Reports a peer that sent a malformed, oversized or forged message: it is logged, dropped, disconnected and
   * refused for a while. Errors of other kinds (timeouts, resets) are not its fault and are ignored.
   */
  async reportMisbehaviour (nodeID: string, err: unknown): Promise<void> {
    if (!this.#admission.banIfHostile(nodeID, err)) return
    this.#table.drop(nodeID)
    const host = this.#host
    if (host == null) return
    try {
      await host.hangUp(nodeIDToPeerId(nodeID))
    } catch (hangUpErr) {
      // The connection may already be gone; the ban keeps it from coming back either way.
      this.#log.debug({ err: hangUpErr, nodeID }, 'hang-up of a misbehaving peer failed')
    }
  }

  async #push (nodeID: string, envelope: SignedEnvelope<CapabilityRecord>, signal: AbortSignal): Promise<void> {
    const stream = await openPeerStream(this.#upkeep, nodeID, CAPABILITIES_PROTOCOL, { signal })
    await pushCapabilities(stream, envelope, { signal })
  }

  readonly #onConnect = (evt: CustomEvent<PeerId>): void => {
    const nodeID = nodeIDOf(evt.detail)
    if (nodeID != null) this.#table.consider(nodeID)
  }

  readonly #onDisconnect = (evt: CustomEvent<PeerId>): void => {
    const nodeID = nodeIDOf(evt.detail)
    if (nodeID == null || this.#host?.getConnections(evt.detail).some(c => c.status === 'open') === true) return
    this.#admission.disconnected(nodeID)
    this.#table.disconnected(nodeID)
  }

  #reconfigure (settings: Settings): void {
    this.#reconfiguring = this.#reconfiguring.then(async () => {
      if (this.#host == null) return
      const urls = settings.wan_enabled ? relayUrls(settings.wan_relay_url) : []
      if (await this.#wan.apply(urls.length > 0 ? urls : null)) {
        this.#gossip.reset()
        await this.#dropStrangers('WAN switched or relay changed')
      }
      if (await this.#lan.apply(settings.cluster_enabled, settings.cluster_passcode)) await this.#dropStrangers('LAN cluster switched or passcode changed')
    }).catch((err: unknown) => {
      this.#log.error({ err }, 'applying network settings failed')
    })
  }

  readonly #onAddressesChanged = (): void => {
    this.#gossip.publishSoon()
  }

  /**
   * Learns the relays in an advertised node's addresses. The addresses themselves stay in the book until the node is
   * dialed on demand (`open`): a new peer in libp2p's peer store is a 'peer:discovery', which the circuit relay
   * transport answers by dialing it (looking for relays while it has fewer reservations than it listens for), so
   * remembering every advertised node there would connect to all of them.
   */
  #remember (entry: AdvertEntry): void {
    this.#wan.learnRelays(entry.addrs)
  }

  /** Whether a peer proven a member of `ptnIDs` shares one of them with this node. */
  #sharesPtn (ptnIDs: string[]): boolean {
    if (ptnIDs.length === 0) return false
    const own = this.#admission.ptnIDsOf(this.#identity.nodeID, this.#records.current().body.ptnCertificates)
    return ptnIDs.some(id => own.includes(id))
  }

  /** Who may be a peer changed: the table follows, and connected nodes that may now be peers are considered. */
  #admissionChanged (): void {
    this.#table.recheck()
    for (const peerId of this.#host?.getPeers() ?? []) {
      const nodeID = nodeIDOf(peerId)
      if (nodeID != null) this.#table.consider(nodeID)
    }
  }

  /** Hangs up on every connected node no longer admitted (the table has already dropped them). */
  async #dropStrangers (why: string): Promise<void> {
    const host = this.#host
    if (host == null) return
    for (const peerId of host.getPeers()) {
      const nodeID = nodeIDOf(peerId)
      if (nodeID == null || this.#admission.typeOf(nodeID) != null) continue
      this.#log.debug({ nodeID, why }, 'hanging up on a node that is no longer a peer')
      try {
        await host.hangUp(peerId)
      } catch (err) {
        // Already closing; nothing else to do.
        this.#log.debug({ err, nodeID }, 'hang-up failed')
      }
    }
  }

  /** Hangs up on a node that is no admitted peer (a failed handshake); an admitted one keeps its connection. */
  async #hangUpIfStranger (nodeID: string, why: string): Promise<void> {
    if (this.#admission.typeOf(nodeID) != null || this.#host == null) return
    this.#log.info({ nodeID, why }, 'disconnecting a node that is not a peer')
    await this.#host.hangUp(nodeIDToPeerId(nodeID))
  }
}

/** A node known by its advert only: no connection, so no latency yet. */
function advertisedPeer (entry: AdvertEntry, type: PeerType, ptnIDs: string[]): PeerInfo {
  return { nodeID: entry.nodeID, type, status: 'online', latencyMs: null, lastSeen: entry.signedAt, record: entry.record, ptnIDs, connected: false, connection: 'relayed' }
}

/** Whether the settings ask for any peer networking: the relay (WAN) or the LAN cluster. */
function networkWanted (settings: Settings): boolean {
  return settings.wan_enabled || settings.cluster_enabled
}

/** The nodeID of a libp2p peer, or null for a peer with another kind of key (no meshnode node). */
function nodeIDOf (peerId: PeerId): string | null {
  try {
    return peerIdToNodeID(peerId)
  } catch (err) {
    if (err instanceof ProtocolError) return null
    throw err
  }
}
