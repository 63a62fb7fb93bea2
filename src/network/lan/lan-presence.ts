import type { PeerDiscovery, PeerInfo, Startable } from '@libp2p/interface'
import { mdns, type MulticastDNSComponents } from '@libp2p/mdns'
import { multiaddr, type Multiaddr } from '@multiformats/multiaddr'

/** Our own mDNS service name: meshnode nodes find each other and nothing else on the LAN. */
export const MDNS_SERVICE_TAG = '_meshnode._udp.local'
/** Listened on while the LAN cluster is on: every interface, a free port (mDNS tells peers which). */
export { DEFAULT_LAN_LISTEN } from '../host/peer-ids.ts'

// The parts of libp2p's internal components this service uses: libp2p passes every component to every service
// factory, so the object this service gets is libp2p's own, which it hands on to its mDNS instance as libp2p would.
// The transport manager is named structurally, since `@libp2p/interface-internal` is not one of our dependencies.
interface Listener {
  getAddrs (): Multiaddr[]
  close (): Promise<void>
}
export type LanPresenceComponents = MulticastDNSComponents & {
  transportManager: { listen (addrs: Multiaddr[]): Promise<void>, getListeners (): Listener[] }
}

export interface LanPresenceOptions {
  /** Milliseconds between mDNS queries. @default 10_000 */
  queryIntervalMs?: number
  /** UDP port of mDNS; only tests change it. @default 5353 */
  port?: number
}

/**
 * LAN presence that can be switched on and off while the node runs (a change of `cluster_enabled` takes effect at
 * once): a listener on the LAN interfaces and mDNS announcing it. libp2p's own mDNS is configured once at start and
 * would announce the node whether the cluster is on or not, so this service owns its mDNS instance instead.
 */
export class LanPresence implements Startable {
  readonly #components: LanPresenceComponents
  readonly #options: LanPresenceOptions
  #mdns: (PeerDiscovery & Startable) | null = null
  #listeners: Listener[] = []
  #onPeer: ((peer: PeerInfo) => void) | null = null

  constructor (components: LanPresenceComponents, options: LanPresenceOptions = {}) {
    this.#components = components
    this.#options = options
  }

  get enabled (): boolean {
    return this.#mdns != null
  }

  /** Listens on `listen` (LAN addresses) and starts mDNS; `onPeer` gets every meshnode node mDNS finds. */
  async enable (listen: string[], onPeer: (peer: PeerInfo) => void): Promise<void> {
    if (this.#mdns != null) return
    const before = new Set(this.#components.transportManager.getListeners())
    await this.#components.transportManager.listen(listen.map(addr => multiaddr(addr)))
    this.#listeners = this.#components.transportManager.getListeners().filter(listener => !before.has(listener))
    this.#onPeer = onPeer
    const discovery = mdns({ serviceTag: MDNS_SERVICE_TAG, interval: this.#options.queryIntervalMs ?? 10_000, port: this.#options.port })(
      this.#components) as PeerDiscovery & Startable
    discovery.addEventListener('peer', this.#peerFound)
    this.#mdns = discovery
    await discovery.start()
  }

  /** Stops mDNS and closes the LAN listeners; connections already open stay (the caller decides about them). */
  async disable (): Promise<void> {
    const discovery = this.#mdns
    this.#mdns = null
    this.#onPeer = null
    if (discovery != null) {
      discovery.removeEventListener('peer', this.#peerFound)
      await discovery.stop()
    }
    const listeners = this.#listeners
    this.#listeners = []
    await Promise.all(listeners.map(async listener => { await listener.close() }))
  }

  readonly #peerFound = (evt: CustomEvent<PeerInfo>): void => {
    this.#onPeer?.(evt.detail)
  }

  async start (): Promise<void> {}

  async stop (): Promise<void> {
    await this.disable()
  }
}

export function lanPresence (options: LanPresenceOptions = {}): (components: LanPresenceComponents) => LanPresence {
  return (components) => new LanPresence(components, options)
}
