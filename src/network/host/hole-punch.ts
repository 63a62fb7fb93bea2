// meshnode's policy around libp2p's DCUtR (direct connection upgrade through relay): what it needs to punch a TCP
// hole that js-libp2p does not give it.
//
// DCUtR runs on every relayed connection: the two nodes swap their public addresses over the relay, then dial each
// other at the same moment, so that each one's outgoing SYN opens its own NAT for the other's (TCP simultaneous
// open). That works only if each node knows, before dialing, the public address its dial will leave from. js-libp2p
// cannot know it: its TCP dials leave from random ports, and identify ignores observed TCP addresses for that reason,
// so DCUtR has no public address to send and gives up. We supply the missing pieces:
// - a punch port: a port picked once per node, that hole-punching dials (and only those) leave from;
// - our public IP, as a public peer (the relay) observes it in identify;
// - DCUtR's address list gets `/ip4/<public IP>/tcp/<punch port>`, right for a NAT that keeps a connection's source
//   port (Linux MASQUERADE and most home routers do, unless told to randomise ports);
// - the role: in a simultaneous open both sides dial, but one must act as the responder of the upgrade. DCUtR asks
//   for that (`initiator: false`) but libp2p's dial queue does not pass it on to the transport, and yamux would not
//   heed it anyway; the punching transport decides from the DCUtR stream on the relayed connection (the node that
//   opened it is the responder) and sets both.
// What this takes of DCUtR's, TCP's and libp2p's internals is applied in patches/libp2p-dcutr.ts, each patch checked
// against the shape it was written for; this file holds the policy (the punch port, our public address, when to try).
// Nothing else changes: the punch address is given to DCUtR only (never advertised, since nothing listens on it), and
// a punch that fails leaves the relayed connection in place, which keeps carrying the traffic.
import { createServer } from 'node:net'
import type { Connection, IdentifyResult, Libp2pEvents, Startable, Transport, TypedEventTarget } from '@libp2p/interface'
import { isPrivate } from '@libp2p/utils'
import { multiaddr } from '@multiformats/multiaddr'
import type { Logger } from 'pino'
import { punchingTcp, viewedDcutr, type DcutrComponents, type TcpComponents } from './patches/libp2p-dcutr.ts'
import { isCircuit } from './relay-address.ts'

/** One DCUtR attempt: the exchange over the relay and the simultaneous dial with its Noise and yamux handshakes.
 *  DCUtR's default of 5 s is lost by a busy machine; a failed attempt then costs this long before the next (3 in all). */
const DCUTR_ATTEMPT_MS = 15_000
/** How long a relayed connection waits for our public address (learned by identify with the relay) before DCUtR. */
const PUBLIC_ADDRESS_WAIT_MS = 30_000

export interface HolePunchDeps {
  log: Logger
  /** Told our public IPv4 address each time a public peer reports it (reachability.ts tests it). */
  onPublicIp?: (ip: string) => void
}

/**
 * The hole-punching part of a node's host: `tcp()` replaces libp2p's TCP transport, `dcutr()` its DCUtR service,
 * and `service()` (a service of its own) learns our public IP.
 */
export class HolePunch {
  /** The local port hole-punching dials leave from. */
  readonly port: number
  readonly #publicAddrs = new Map<'ip4' | 'ip6', string>()
  /** Called once we know a public address: relayed connections that opened before we did wait for it. */
  readonly #addressWaiters = new Set<() => void>()
  readonly #log: Logger
  readonly #onPublicIp: ((ip: string) => void) | null

  private constructor (port: number, deps: HolePunchDeps) {
    this.port = port
    this.#log = deps.log
    this.#onPublicIp = deps.onPublicIp ?? null
  }

  /** Picks a free punch port. */
  static async create (deps: HolePunchDeps): Promise<HolePunch> {
    return new HolePunch(await freePort(), deps)
  }

  /** Our public address per IP version, as a public peer last saw it; empty until one has. */
  publicAddrs (): string[] {
    return [...this.#publicAddrs.values()]
  }

  /** Learns our public IP from what a public peer (the relay) saw of us on a direct connection. */
  observed (result: Pick<IdentifyResult, 'observedAddr' | 'connection'>): void {
    const { observedAddr, connection } = result
    if (observedAddr == null || isCircuit(connection.remoteAddr) || isPrivate(connection.remoteAddr)) return
    const ip = observedAddr.getComponents()[0]
    if (ip == null || (ip.name !== 'ip4' && ip.name !== 'ip6') || ip.value == null || isPrivate(observedAddr)) return
    this.#publicAddrs.set(ip.name, `/${ip.name}/${ip.value}/tcp/${this.port}`)
    if (ip.name === 'ip4') this.#onPublicIp?.(ip.value)
    for (const wake of this.#addressWaiters) wake()
    this.#addressWaiters.clear()
  }

  /** Whether we know a public address, waiting up to `ms` for one (identify with the relay may answer after a peer
   *  has already reached us through it). */
  async #publicAddressKnown (ms: number): Promise<boolean> {
    if (this.publicAddrs().length > 0) return true
    await new Promise<void>((resolve) => {
      const timer = setTimeout(done, ms).unref() // a node that stops meanwhile is not held up
      function done (): void { clearTimeout(timer); resolve() }
      this.#addressWaiters.add(done)
    })
    return this.publicAddrs().length > 0
  }

  /** libp2p's TCP transport, whose hole-punching dials leave from the punch port, as the right side of the upgrade
   *  (patches/libp2p-dcutr.ts). */
  tcp (): (components: TcpComponents) => Transport {
    return punchingTcp(this.port)
  }

  /** libp2p's DCUtR service, whose address list includes our punch address, and which acts on a relayed connection it
   *  accepted only once we know a public address of ours: without one there is nothing the other side could dial, so
   *  a node on one machine or a LAN never tries in vain (patches/libp2p-dcutr.ts). */
  dcutr (): (components: DcutrComponents) => unknown {
    return viewedDcutr({ timeout: DCUTR_ATTEMPT_MS }, {
      addresses: (self) => this.publicAddrs().map(addr => multiaddr(`${addr}/p2p/${self.toString()}`)),
      beforeUpgrade: async (connection) => await this.#publicAddressKnown(PUBLIC_ADDRESS_WAIT_MS) && connection.status === 'open'
    })
  }

  /** A service that feeds `observed` from every identify, and logs each relayed connection that a direct one joins. */
  service (): (components: { events: TypedEventTarget<Libp2pEvents> } & Pick<DcutrComponents, 'connectionManager'>) => Startable {
    return ({ events, connectionManager }) => {
      const onIdentify = (evt: CustomEvent<IdentifyResult>): void => { this.observed(evt.detail) }
      const onOpen = (evt: CustomEvent<Connection>): void => {
        const direct = evt.detail
        if (isCircuit(direct.remoteAddr)) return
        const relayed = connectionManager.getConnections(direct.remotePeer).find(connection => isCircuit(connection.remoteAddr) && connection.status === 'open')
        if (relayed == null) return
        this.#log.info({ peer: direct.remotePeer.toString(), relayed: relayed.remoteAddr.toString(), direct: direct.remoteAddr.toString() },
          'a direct connection joined a relayed one (hole punched); traffic moves to it')
      }
      return {
        start: () => {
          events.addEventListener('peer:identify', onIdentify)
          events.addEventListener('connection:open', onOpen)
        },
        stop: () => {
          events.removeEventListener('peer:identify', onIdentify)
          events.removeEventListener('connection:open', onOpen)
        }
      }
    }
  }
}

async function freePort (): Promise<number> {
  const server = createServer()
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject)
    server.listen({ port: 0, host: '0.0.0.0' }, resolve)
  })
  const address = server.address()
  await new Promise<void>((resolve) => { server.close(() => { resolve() }) })
  if (address == null || typeof address === 'string') throw new Error('could not pick a punch port')
  return address.port
}
