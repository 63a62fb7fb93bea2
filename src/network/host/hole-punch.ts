// meshnode's policy around libp2p's DCUtR (direct connection upgrade through relay): what it needs to punch a TCP
// hole that js-libp2p does not give it.
//
// DCUtR runs on every relayed connection: the two nodes swap their public addresses over the relay, then dial each
// other at the same moment, so that each one's outgoing SYN opens its own NAT for the other's (TCP simultaneous
// open). That works only if each node knows, before dialing, the public address its dial will leave from. js-libp2p
// cannot know it: its TCP dials leave from random ports, and identify ignores observed TCP addresses for that reason
// (https://github.com/libp2p/js-libp2p/issues/2620), so DCUtR has no public address to send and gives up. We supply the missing pieces:
// - a punch port: a port picked once per node, that hole-punching dials (and only those) leave from;
// - our public IP, as a public peer (the relay) observes it in identify;
// - DCUtR's address list gets `/ip4/<public IP>/tcp/<punch port>`, right for a NAT that keeps a connection's source
//   port (Linux MASQUERADE and most home routers do, unless told to randomise ports);
// - the role: in a simultaneous open both sides dial, but one must act as the responder of the upgrade. DCUtR asks
//   for that (`initiator: false`) but libp2p's dial queue does not pass it on to the transport, and yamux would not
//   heed it anyway; the transport wrapper below decides from the DCUtR stream on the relayed connection (the node
//   that opened it is the responder) and sets both.
// Nothing else changes: the punch address is given to DCUtR only (never advertised, since nothing listens on it), and
// a punch that fails leaves the relayed connection in place, which keeps carrying the traffic.
import { createServer } from 'node:net'
import { dcutr } from '@libp2p/dcutr'
import type { Connection, IdentifyResult, Libp2pEvents, PeerId, Startable, Transport, TypedEventTarget } from '@libp2p/interface'
import { isPrivate } from '@libp2p/utils'
import { tcp } from '@libp2p/tcp'
import { multiaddr, type Multiaddr } from '@multiformats/multiaddr'
import type { Logger } from 'pino'
import { withMethods } from './peer-ids.ts'
import { isCircuit } from './relay-address.ts'

/** The dial priority DCUtR gives its hole-punching dials (@libp2p/dcutr 3.0.28, `DCUTR_DIAL_PRIORITY`); no other dial uses it. */
const DCUTR_DIAL_PRIORITY = 100
const DCUTR_PROTOCOL = '/libp2p/dcutr'
/** One DCUtR attempt: the exchange over the relay and the simultaneous dial with its Noise and yamux handshakes.
 *  DCUtR's default of 5 s is lost by a busy machine; a failed attempt then costs this long before the next (3 in all). */
const DCUTR_ATTEMPT_MS = 15_000
/** How long a relayed connection waits for our public address (learned by identify with the relay) before DCUtR. */
const PUBLIC_ADDRESS_WAIT_MS = 30_000

type DcutrComponents = Parameters<ReturnType<typeof dcutr>>[0] & { peerId: PeerId }
/** libp2p hands every transport all its components; the wrapper needs the connections besides TCP's own. */
type TcpComponents = Parameters<ReturnType<typeof tcp>>[0] & Pick<DcutrComponents, 'connectionManager'>

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

  /** libp2p's TCP transport, whose hole-punching dials leave from the punch port, as the right side of the upgrade. */
  tcp (): (components: TcpComponents) => Transport {
    return (components) => {
      const transport = tcp()(components)
      const dial = transport.dial.bind(transport)
      transport.dial = async (ma, options) => {
        if ((options as { priority?: number }).priority !== DCUTR_DIAL_PRIORITY) return await dial(ma, options)
        const punchOptions = { ...options, localPort: this.port } as typeof options
        if (openedDcutrStream(components.connectionManager.getConnections(), ma)) {
          // The responder: the upgrader negotiates as the answering side when told `initiator: false`, but yamux
          // takes its role from the socket's direction, which a dial always sets to outbound ("Both endpoints are
          // clients"); both are set here.
          const upgrader = options.upgrader
          Object.assign(punchOptions, {
            initiator: false,
            upgrader: new Proxy(upgrader, {
              get: (target, key) => key === 'upgradeOutbound'
                ? async (maConn: Parameters<typeof upgrader.upgradeOutbound>[0], upgradeOptions: Parameters<typeof upgrader.upgradeOutbound>[1]) => {
                  Object.assign(maConn, { direction: 'inbound' })
                  return await target.upgradeOutbound(maConn, upgradeOptions)
                }
                : Reflect.get(target, key)
            })
          })
        }
        return await dial(ma, punchOptions)
      }
      return transport
    }
  }

  /** libp2p's DCUtR service, whose address list includes our punch address. */
  dcutr (): (components: DcutrComponents) => unknown {
    return (components) => {
      const addressManager: DcutrComponents['addressManager'] = Object.create(components.addressManager)
      addressManager.getAddresses = () => {
        const peer = `/p2p/${components.peerId.toString()}`
        return [...components.addressManager.getAddresses(), ...this.publicAddrs().map(addr => multiaddr(addr + peer))]
      }
      // DCUtR starts on every relayed connection it accepted; without a public address of ours there is nothing the
      // other side could dial, so it is not started then (a node on one machine or a LAN never tries in vain).
      const registrar = withMethods(components.registrar, {
        register: async (protocol: string, topology: Parameters<DcutrComponents['registrar']['register']>[1]) => {
          return await components.registrar.register(protocol, {
            ...topology,
            onConnect: async (peer, connection) => {
              // DCUtR acts on the relayed connections it accepted only; those wait for our public address
              const upgradable = isCircuit(connection.remoteAddr) && connection.direction === 'inbound'
              if (upgradable && (!await this.#publicAddressKnown(PUBLIC_ADDRESS_WAIT_MS) || connection.status !== 'open')) return
              await topology.onConnect?.(peer, connection)
            }
          })
        }
      })
      // libp2p's components object throws on a missing key, so it cannot be spread: DCUtR gets a view of it.
      return dcutr({ timeout: DCUTR_ATTEMPT_MS })(new Proxy(components, {
        get: (target, key) => key === 'addressManager' ? addressManager : key === 'registrar' ? registrar : Reflect.get(target, key)
      }))
    }
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

/** Whether we opened a DCUtR stream on a relayed connection to the peer `ma` names: then we are DCUtR's "B", the side
 *  that answers the upgrade of the punched connection (the other one, "A", leads it). */
function openedDcutrStream (connections: Connection[], ma: Multiaddr): boolean {
  const peer = ma.getComponents().findLast(component => component.name === 'p2p')?.value
  if (peer == null) return false
  return connections.some(connection => connection.remotePeer.toString() === peer && isCircuit(connection.remoteAddr) &&
    connection.streams.some(stream => stream.protocol === DCUTR_PROTOCOL && stream.direction === 'outbound'))
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
