import { peerIdFromString } from '@libp2p/peer-id'
import type { Logger } from 'pino'
import type { NodeIdentity } from '../../identity/index.ts'
import type { Admission } from '../peers/admission.ts'
import type { PeerHost } from '../host/libp2p-node.ts'
import { peerIdToNodeID } from '../host/peer-ids.ts'
import { WanClient, type WanClientOptions } from './wan.ts'

/** Relays a node holds a reservation on, and keeps a client for (more when more are configured): losing one leaves one. */
export const WANTED_RELAYS = 2
/** Relays learned from peers' addresses that are remembered to be tried, at most. */
const MAX_LEARNED_RELAYS = 16
/** Clients for learned relays at most (connected, being tried, or retried after they left). */
const MAX_LEARNED_CLIENTS = WANTED_RELAYS + 2
/** Failures in a row after which a learned relay that never answered a directory sync is given up. */
const LEARNED_RELAY_FAILURES = 3
/** Learned relays given up, remembered (the oldest forgotten first) so that peers' adverts do not bring them back. */
const MAX_FAILED_RELAYS = 256

export interface WanPresenceDeps {
  identity: NodeIdentity
  admission: Admission
  /** A node a relay listed is connected: it may be a peer. */
  discovered: (nodeID: string) => void
  /** How many more listed nodes the clients may connect to now (the connection policy). */
  dialBudget: () => number
  /** A relay this node uses (configured or learned): kept connected by the connection policy. */
  relayConnected: (relayPeer: string) => void
  log: Logger
}

interface RelayClient {
  client: WanClient
  /** The relay's nodeID when it was learned from a peer's circuit address; null when named in `wan_relay_url`. */
  learned: string | null
  /** Whether it ever answered a directory sync (a learned one is no relay until it has). */
  synced: boolean
}

/**
 * WAN presence (the `wan_enabled` and `wan_relay_url` settings): while on, one `WanClient` per relay `wan_relay_url`
 * names (one URL, or several separated by commas) holds the relay connection, this node's directory record there, and
 * connects to some of the nodes it lists; the host keeps reservations on two relays. When fewer than two relays are
 * configured, relays learned from peers' circuit addresses are added until two are, so that losing one relay isolates
 * nobody. Every node but a relay may then be a peer. Off, or other relays, stops the clients and forgets the relays.
 */
export class WanPresence {
  readonly #deps: WanPresenceDeps
  readonly #options: Omit<WanClientOptions, 'relayUrl'> | undefined
  #host: PeerHost | null = null
  readonly #clients = new Map<string, RelayClient>()
  /**
   * nodeIDs of every relay known while on: each configured one once connected, each learned one once it answered a
   * directory sync. A relay seen only in a peer's circuit address is a candidate (`#learned`), never taken for a relay
   * on that peer's word: a node named there would be refused as a peer by everyone who heard it.
   */
  readonly #relayIDs = new Set<string>()
  /** Relay multiaddrs learned from peers, by relay nodeID, not yet given a client. */
  readonly #learned = new Map<string, string>()
  /** nodeIDs of learned relays given up (see MAX_FAILED_RELAYS). */
  readonly #failed = new Set<string>()
  #urls: string[] | null = null

  constructor (deps: WanPresenceDeps, options?: Omit<WanClientOptions, 'relayUrl'>) {
    this.#deps = deps
    this.#options = options
  }

  attach (host: PeerHost): void {
    this.#host = host
  }

  /** Whether a client holds a connection to at least one relay. */
  get relayConnected (): boolean {
    return [...this.#clients.values()].some(({ client }) => client.relayConnected)
  }

  /** The relays a client is connected to, by peer id. */
  connectedRelays (): string[] {
    return [...this.#clients.values()].flatMap(({ client }) => client.relayConnected && client.relayPeerId != null ? [client.relayPeerId.toString()] : [])
  }

  /** Whether `nodeID` is a relay (never a peer). */
  isRelay (nodeID: string): boolean {
    return this.#relayIDs.has(nodeID)
  }

  /** Switches WAN to `urls` (null: off). Returns whether anything changed. */
  async apply (urls: string[] | null): Promise<boolean> {
    const host = this.#host
    if (host == null || sameList(urls, this.#urls)) return false
    const previous = [...this.#clients.values()]
    this.#clients.clear()
    this.#learned.clear()
    this.#failed.clear()
    this.#urls = null
    if (previous.length > 0) {
      // Off first, then stop: while the clients stop (it takes a while), a WAN node that connects again must already
      // be refused, or it would fetch our record and stay in its table with a connection nobody hangs up.
      this.#deps.admission.setWan(false)
      for (const { client } of previous) {
        const relay = client.relayPeerId
        await client.stop()
        // Forget the relay, or libp2p's relay discovery would dial it again to restore the reservation.
        if (relay != null) await host.peerStore.delete(relay)
      }
      this.#relayIDs.clear()
      this.#deps.log.info('WAN stopped')
    }
    if (urls == null || urls.length === 0) return true
    this.#urls = urls
    this.#deps.admission.setWan(true, (nodeID) => this.isRelay(nodeID))
    for (const url of urls) await this.#startClient(host, url, null)
    this.#deps.log.info({ relayUrls: urls }, 'WAN started')
    return true
  }

  /**
   * Relays seen in a peer's addresses (`<relay>/p2p/<relayID>/p2p-circuit/...`) are candidates: while fewer than two
   * relays are in use, one is tried, and is a relay once it answers as one.
   */
  learnRelays (addrs: string[]): void {
    if (this.#urls == null) return
    for (const addr of addrs) {
      const at = addr.indexOf('/p2p-circuit')
      if (at <= 0) continue
      const relayAddr = addr.slice(0, at)
      const relayPeer = /\/p2p\/([^/]+)$/.exec(relayAddr)?.[1]
      const nodeID = relayPeer == null ? null : nodeIDOfPeer(relayPeer)
      if (nodeID == null || this.#relayIDs.has(nodeID) || this.#learned.has(nodeID) || this.#failed.has(nodeID)) continue
      // A relay a client holds already (a configured one not connected yet included) is no candidate
      if (this.#clients.has(relayAddr) || [...this.#clients.entries()].some(([url, { learned, client }]) =>
        learned === nodeID || client.relayPeerId?.toString() === relayPeer || url.endsWith(`/p2p/${relayPeer ?? ''}`))) continue
      if (this.#learned.size < MAX_LEARNED_RELAYS) this.#learned.set(nodeID, relayAddr)
    }
    this.#addLearned()
  }

  async stop (): Promise<void> {
    const clients = [...this.#clients.values()]
    this.#clients.clear()
    this.#learned.clear()
    this.#failed.clear()
    this.#relayIDs.clear()
    this.#urls = null
    this.#host = null
    this.#deps.admission.setWan(false)
    for (const { client } of clients) await client.stop()
  }

  async #startClient (host: PeerHost, url: string, learned: string | null): Promise<void> {
    if (this.#clients.has(url)) return   // one client an address: a second would replace the first, left running
    const client = new WanClient({
      host, identity: this.#deps.identity, dialBudget: this.#deps.dialBudget, log: this.#deps.log.child({ part: 'wan', relay: url })
    }, { ...this.#options, relayUrl: url, giveUpAfterFailures: learned == null ? null : LEARNED_RELAY_FAILURES })
    client.on('peer:discovered', (nodeID, addrs) => {
      this.learnRelays(addrs)
      this.#deps.discovered(nodeID)
    })
    client.on('relay:connected', (relayPeer) => {
      const twin = [...this.#clients.entries()].find(([other, { client: c }]) => other !== url && c.relayPeerId?.toString() === relayPeer)
      if (twin != null) {
        // Each client still uses its own relay's directory, but libp2p holds one reservation per peer id: nodes that
        // cannot be dialed directly are reached through one of the two only.
        this.#deps.log.warn({ relays: [twin[0], url], peerId: relayPeer }, 'two relays answer with one key (a relay data dir copied, or one relay named twice): peers cannot tell them apart; give each relay its own --data-dir')
      }
      // A configured relay is taken at its word; a learned one once it answers as a relay (a peer's address may name
      // any node): until then the connection policy keeps no connection for it either
      if (learned == null) this.#usesRelay(relayPeer)
    })
    client.on('relay:synced', (relayPeer) => {
      entry.synced = true
      this.#usesRelay(relayPeer)
    })
    client.on('relay:failed', () => {
      if (this.#clients.get(url)?.client !== client) return
      this.#clients.delete(url)
      if (learned != null) this.#failed.add(learned)
      if (this.#failed.size > MAX_FAILED_RELAYS) this.#failed.delete(this.#failed.values().next().value as string)
      client.stop().catch((err: unknown) => { this.#deps.log.warn({ err, relay: url }, 'stopping a relay client failed') })
      this.#addLearned()
    })
    client.on('relay:disconnected', () => { this.#addLearned() })
    const entry: RelayClient = { client, learned, synced: false }
    this.#clients.set(url, entry)
    await client.start()
  }

  /** `relayPeer` is a relay this node uses: never a peer, and its connection kept by the connection policy. */
  #usesRelay (relayPeer: string): void {
    const nodeID = nodeIDOfPeer(relayPeer)
    if (nodeID != null && !this.#relayIDs.has(nodeID)) {
      this.#relayIDs.add(nodeID)
      this.#deps.admission.emit('changed')   // a node met as a peer may turn out to be a relay
    }
    this.#deps.relayConnected(relayPeer)
  }

  /**
   * Adds a learned relay while fewer than `WANTED_RELAYS` are connected or being tried: a configured one counts
   * always, a learned one while connected or until it is given up (a learned relay that answered once and is gone
   * now is retried, but no longer counts, so another may be tried beside it).
   */
  #addLearned (): void {
    const host = this.#host
    if (host == null || this.#urls == null) return
    const working = [...this.#clients.values()].filter(({ client, learned, synced }) => learned == null || client.relayConnected || !synced).length
    if (working >= WANTED_RELAYS) return
    const next = this.#learned.entries().next()
    if (next.done === true) return
    // Learned relays that answered once and are gone are retried, MAX_LEARNED_CLIENTS of them at most: past it the
    // oldest goes for the new candidate, so relays that answer once and leave cannot pile up clients
    const learnedClients = [...this.#clients.entries()].filter(([, { learned }]) => learned != null)
    if (learnedClients.length >= MAX_LEARNED_CLIENTS) {
      const gone = learnedClients.find(([, { client, synced }]) => synced && !client.relayConnected)
      if (gone == null) return
      const [url, { client }] = gone
      this.#clients.delete(url)
      client.stop().catch((err: unknown) => { this.#deps.log.warn({ err, relay: url }, 'stopping a relay client failed') })
    }
    const [nodeID, addr] = next.value
    this.#learned.delete(nodeID)
    this.#deps.log.info({ relay: addr }, 'using a relay learned from a peer')
    this.#startClient(host, addr, nodeID).catch((err: unknown) => { this.#deps.log.warn({ err, relay: addr }, 'a learned relay could not be used') })
  }
}

function sameList (a: string[] | null, b: string[] | null): boolean {
  if (a == null || b == null) return a === b
  return a.length === b.length && a.every((item, i) => item === b[i])
}

/** The nodeID of a relay's peer id string, or null for one without an Ed25519 key (it can be no peer's either). */
function nodeIDOfPeer (peer: string): string | null {
  try {
    return peerIdToNodeID(peerIdFromString(peer))
  } catch (err) {
    // Not a peer id (a malformed address a peer advertised), or a key that is not Ed25519.
    if (err instanceof Error) return null
    throw err
  }
}
