// What a node learns of its own reachability: whether other nodes can dial it directly, or only through a relay.
// libp2p's AutoNAT v2 (@libp2p/autonat-v2) tests it: a node asks a peer it is connected to to dial one of its
// addresses back, over a new connection, and to send a nonce on it; the dial-back is then closed by the peer that made
// it, and the connection the request came on is left alone (AutoNAT v1 answered on that connection and closed it,
// which cut relay connections in a loop). Every node (and `meshnode relay`) answers these requests and asks them.
//
// What autonat-v2 2.0.15 does, and what meshnode adds around it:
// - It tests only public addresses (private, loopback and non-global IPv6 ones are skipped) that are not verified yet,
//   asks only peers on a direct connection (not relayed ones), and each peer once per connection, from a /8 (IPv4)
//   it has no answer from yet for that address: one answer per network segment, so that a few peers in one network
//   cannot decide alone. One successful dial-back confirms a listen address or an IP mapping (four, from four
//   segments, an address identify observed; js-libp2p ignores observed TCP addresses, see hole-punch.ts), and eight
//   failures from eight segments unconfirm one. These thresholds are constants of the package, not options.
// - A node behind NAT listens on private addresses only, so it would have nothing to test. Once a public peer has
//   told us our public IP (identify, as hole-punch.ts learns it), each private TCP listen address is given to libp2p
//   as an IP mapping at the same port (what a port forward on the router, by hand or UPnP, makes reachable): an
//   unverified address that autonat-v2 then tests, and that is advertised only once a dial-back has confirmed it.
// - 'private' does not wait for eight failures: a node in a small network (one relay, a few peers, often all in one
//   /8) never collects them, since each segment answers once. A single failed dial-back to our public address says
//   that this address is not reachable, and a wrong 'private' costs nothing (the node keeps its relay reservations
//   as every NATed node does); 'public' needs a dial-back that brought back our nonce. autonat-v2 reports a single
//   failure nowhere but its log (the client's trace line `%p could not dial %a`), so its logger is tapped for it.
// - Circuit addresses are not tested: their reachability is the relay reservation's, and a relay asked to dial a
//   circuit address through itself refuses (E_DIAL_REFUSED), which makes the asking client stop reading the answers
//   for the addresses after it.
// - A node dials back at most MAX_CONCURRENT_DIAL_BACKS addresses at once, and refuses further requests meanwhile
//   (a refusal is no failure for the asking client, which asks another peer): a relay that all its nodes reconnect to
//   at once does not turn into a dial storm.
// - The dial-back connection is a second connection to a peer already connected: connection-policy.ts leaves it alone
//   (neither a duplicate to close nor counted against the limit) while this node may be dialing that peer back (it is
//   answering a request of that peer's), or that peer may be dialing it back (asked in the last AUTONAT_OPTIONS.timeout).
//   The request's stream is no sign of that: autonat-v2 asks on every connection identify runs on, dial-backs
//   included, and its server closes its dial-back once the nonce is answered; a request made on that connection is
//   still dialed back after, when neither its stream nor its connection is open any more (seen: the duplicate rule
//   then closed a node's relay connection, or failed the dial-back).
// What this takes of autonat-v2's internals (the views of the components it is handed, its log line) is applied in
// patches/libp2p-autonat-v2.ts, each patch checked against the shape it was written for.
import type { AutoNATv2Components, autoNATv2 } from '@libp2p/autonat-v2'
import type { Connection } from '@libp2p/interface'
import { isLoopback, isNetworkAddress, isPrivate } from '@libp2p/utils'
import type { Logger } from 'pino'
import { viewedAutonatV2 } from './patches/libp2p-autonat-v2.ts'
import { isCircuit } from './relay-address.ts'
import type { Reachability, ReachabilityStatus } from './reachability-status.ts'

/** Dial-backs a node makes at once as an AutoNAT server; requests beyond are refused until one ends. */
export const MAX_CONCURRENT_DIAL_BACKS = 8

/** autonat-v2's options. Its defaults stand: 30 s for a request and its dial-back; 2 requests at once per connection. */
const AUTONAT_OPTIONS = { timeout: 30_000, maxInboundStreams: 2 }

/**
 * A host's AutoNAT service and what it learned. `autonat(autoNATv2)` is the service to give libp2p; `publicIp` is
 * told our public IP; `status()` answers what the node knows now.
 */
export class ReachabilityMonitor {
  readonly #log: Logger
  #addressManager: AutoNATv2Components['addressManager'] | null = null
  /** Our addresses a dial-back failed to. */
  readonly #failed = new Set<string>()
  /** The IP mappings added: `<internal ip>:<port>` → the public IP. */
  readonly #mapped = new Map<string, string>()
  #dialBacks = 0
  #last: Reachability = 'unknown'
  /** Dial requests this node is answering now, by the asking peer's id: it may be dialing that peer back. */
  readonly #answering = new Map<string, number>()
  /** Peers this node asked to dial it back, by peer id: until when their dial-back may come. */
  readonly #asked = new Map<string, number>()

  constructor (deps: { log: Logger }) {
    this.#log = deps.log
  }

  /** autonat-v2's service, seeing the host's components through the views described at the top of this file. */
  autonat (factory: typeof autoNATv2): (components: AutoNATv2Components) => unknown {
    const viewed = viewedAutonatV2(factory, AUTONAT_OPTIONS, {
      testable: (address) => !isCircuit(address.multiaddr),
      addressesChanged: () => { this.#changed() },
      dialBackFailed: (address) => {
        this.#failed.add(address)
        this.#changed()
      },
      mayDialBack: () => this.#dialBacks < MAX_CONCURRENT_DIAL_BACKS,
      dialingBack: async (dial) => {
        this.#dialBacks++
        try {
          return await dial()
        } finally {
          this.#dialBacks--
        }
      },
      answering: async (peer, answer) => {
        this.#answering.set(peer, (this.#answering.get(peer) ?? 0) + 1)
        try {
          await answer()
        } finally {
          const left = (this.#answering.get(peer) ?? 1) - 1
          if (left > 0) this.#answering.set(peer, left)
          else this.#answering.delete(peer)
        }
      },
      asking: (peer) => {
        const now = Date.now()
        for (const [asked, until] of this.#asked) if (until <= now) this.#asked.delete(asked)
        this.#asked.set(peer, now + AUTONAT_OPTIONS.timeout)
      }
    })
    return (components) => {
      this.#addressManager = components.addressManager
      return viewed(components)
    }
  }

  /**
   * A public peer saw us at this IPv4 address: each private TCP listen address may be forwarded there at its own port,
   * an IP mapping that AutoNAT then tests. Told at every identify with a public peer: idempotent, and it maps the
   * listeners added since (the LAN one) and follows a new public IP.
   */
  publicIp (ip: string): void {
    const addressManager = this.#addressManager
    if (addressManager == null) return
    for (const { multiaddr: ma, type } of addressManager.getAddressesWithMetadata()) {
      const [host, port, ...rest] = ma.getComponents()
      if (type !== 'transport' || host?.name !== 'ip4' || port?.name !== 'tcp' || rest.length > 0 || !isPrivate(ma) || isLoopback(ma)) continue
      const internal = `${host.value}:${port.value}`
      const previous = this.#mapped.get(internal)
      if (previous === ip || host.value == null) continue
      if (previous != null) addressManager.removePublicAddressMapping(host.value, Number(port.value), previous, Number(port.value), 'tcp')
      addressManager.addPublicAddressMapping(host.value, Number(port.value), ip, Number(port.value), 'tcp')
      this.#mapped.set(internal, ip)
    }
  }

  /**
   * Whether `connection`, just opened, may be an AutoNAT dial-back: a direct one (circuit addresses are not tested)
   * that this node makes (outbound) to a peer whose dial request it is answering, or that a peer makes (inbound) which
   * this node asked to dial it back in the last AUTONAT_OPTIONS.timeout (autonat-v2's server dials back within its
   * timeout, 30 s by default).
   */
  isDialBack (connection: Pick<Connection, 'direct' | 'direction' | 'remotePeer'>): boolean {
    if (!connection.direct) return false
    const peer = connection.remotePeer.toString()
    if (connection.direction === 'outbound') return this.#answering.has(peer)
    const until = this.#asked.get(peer)
    return until != null && until > Date.now()
  }

  status (): ReachabilityStatus {
    const addressManager = this.#addressManager
    if (addressManager == null) return { reachability: 'unknown', publicAddrs: [] }
    // our direct public addresses, as learned (announced ones are configured, not learned)
    const direct = addressManager.getAddressesWithMetadata().filter(({ multiaddr: ma, type }) =>
      type !== 'announce' && !isCircuit(ma) && isNetworkAddress(ma) && !isPrivate(ma))
    const publicAddrs = [...new Set(direct.filter(address => address.verified).map(address => address.multiaddr.toString()))]
    if (publicAddrs.length > 0) return { reachability: 'public', publicAddrs }
    if (direct.some(address => this.#failed.has(address.multiaddr.toString()))) return { reachability: 'private', publicAddrs: [] }
    return { reachability: 'unknown', publicAddrs: [] }
  }

  #changed (): void {
    const status = this.status()
    if (status.reachability === this.#last) return
    this.#last = status.reachability
    this.#log.info(status, 'reachability changed')
  }
}
