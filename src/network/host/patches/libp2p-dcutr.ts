// Every patch meshnode makes around @libp2p/dcutr, applied here and reported (`dcutrPatches`): what hole punching
// (hole-punch.ts, whose policy decides the punch port and our public address) needs of DCUtR, of the TCP transport its
// dials go through and of libp2p's dial path and upgrader, which none of them offers. DCUtR's dials are recognised by
// their private dial priority; they leave from the punch port and, on the answering side of a simultaneous open, take
// the responder's role; DCUtR sees the host's address manager and registrar through views.
//
// Each patch checks the shape it was written for (a constant's value, the calls that carry an option from DCUtR to
// the socket, what DCUtR reads of its components) and, finding another, leaves the dependency alone and reports what
// it found: the host warns when it starts (libp2p-node.ts), and test/network/patches.test.ts fails. docs/UPGRADING.md
// lists each patch with its check.
import { dcutr, multicodec } from '@libp2p/dcutr'
import type { Connection, PeerId, Transport } from '@libp2p/interface'
import { tcp } from '@libp2p/tcp'
import type { Multiaddr } from '@multiformats/multiaddr'
import type { PatchReport } from '../../../system/patch-report.ts'
import { isCircuit } from '../relay-address.ts'
import { firstProblem, installed, missingText, reportOf } from './shape.ts'
import { componentsView, withMethods } from './views.ts'

/** DCUtR's protocol: the stream its two sides swap their addresses on, over the relayed connection. */
export const DCUTR_PROTOCOL = multicodec

/** The dial priority DCUtR gives its hole-punching dials (@libp2p/dcutr's private `DCUTR_DIAL_PRIORITY`); no other
 *  dial uses it (libp2p's default is 50). */
export const DCUTR_DIAL_PRIORITY = 100
const LIBP2P_DEFAULT_DIAL_PRIORITY = 50

export type DcutrComponents = Parameters<ReturnType<typeof dcutr>>[0] & { peerId: PeerId }
/** libp2p hands every transport all its components; the punching TCP needs the connections besides TCP's own. */
export type TcpComponents = Parameters<ReturnType<typeof tcp>>[0] & Pick<DcutrComponents, 'connectionManager'>
type Topology = Parameters<DcutrComponents['registrar']['register']>[1]

const DCUTR = '@libp2p/dcutr'
const TCP = '@libp2p/tcp'
const LIBP2P = 'libp2p'
const UTILS = '@libp2p/utils'
const YAMUX = '@chainsafe/libp2p-yamux'
const DCUTR_FILE = 'dist/src/dcutr.js'

/** B's dial (it opened the DCUtR stream, and answers the upgrade) and A's, as DCUtR makes them. */
const B_DIAL = 'openConnection(multiaddrs, { signal: options.signal, priority: DCUTR_DIAL_PRIORITY, force: true, initiator: false });'
const A_DIAL = 'openConnection(multiaddrs, { signal: options.signal, priority: DCUTR_DIAL_PRIORITY, force: true });'

/** `punch-port`: the dial priority reaches the TCP transport, and the dial options reach the socket. */
function punchPortProblem (): string | null {
  return firstProblem([
    () => missingText(DCUTR, DCUTR_FILE, [`const DCUTR_DIAL_PRIORITY = ${DCUTR_DIAL_PRIORITY};`, B_DIAL, A_DIAL]),
    () => missingText(LIBP2P, 'dist/src/connection-manager/index.js', [`export const DEFAULT_DIAL_PRIORITY = ${LIBP2P_DEFAULT_DIAL_PRIORITY};`]),
    // the dial queue keeps the priority in its job's options, runs the job with them, and dials the transport with them
    () => missingText(LIBP2P, 'dist/src/connection-manager/dial-queue.js', [
      'priority: options.priority ?? DEFAULT_DIAL_PRIORITY,', 'return await this.dialPeer(options, signal);',
      'const conn = await this.components.transportManager.dial(address.multiaddr, { ...options,'
    ]),
    () => missingText(UTILS, 'dist/src/queue/job.js', ['const result = await raceSignal(this.fn({ ...(this.options ?? {}),']),
    () => missingText(LIBP2P, 'dist/src/transport-manager.js', ['return transport.dial(ma, { ...options, upgrader: this.components.upgrader });']),
    // TCP opens its socket with the dial's options (`localPort` among them)
    () => missingText(TCP, 'dist/src/tcp.js', ['const cOpts = multiaddrToNetConfig(ma, { ...(this.opts.dialOpts ?? {}), ...options });', 'rawSocket = net.connect(cOpts);']),
    () => missingText(TCP, 'dist/src/utils.js', ["ipv6Only: config.type === 'ip6', ...options };"])
  ])
}

/** `responder-role`: who answers, and the two places the role is taken from. */
function responderRoleProblem (): string | null {
  return firstProblem([
    // B opens the DCUtR stream and asks to answer the upgrade, which libp2p's dial queue does not pass on
    () => missingText(DCUTR, DCUTR_FILE, ['stream = await relayedConnection.newStream([multicodec], {', B_DIAL]),
    () => missingText(TCP, 'dist/src/tcp.js', ["direction: 'outbound',", 'return await options.upgrader.upgradeOutbound(maConn, options);']),
    () => missingText(LIBP2P, 'dist/src/upgrader.js', ['async upgradeOutbound(maConn, opts) {', "if (opts.initiator === false) { direction = 'inbound'; }"]),
    () => missingText(YAMUX, 'dist/src/muxer.js', ["this.client = maConn.direction === 'outbound';"])
  ])
}

/** `punch-address`: DCUtR takes the address manager once, and offers what its `getAddresses()` answers. */
function punchAddressProblem (): string | null {
  return missingText(DCUTR, DCUTR_FILE, ['this.addressManager = components.addressManager;', 'observedAddresses: this.addressManager.getAddresses().map(ma => ma.bytes)'])
}

/** `public-address-first`: DCUtR takes the registrar once, and acts on the inbound relayed connections its topology is told of. */
function publicAddressFirstProblem (): string | null {
  return missingText(DCUTR, DCUTR_FILE, [
    'this.registrar = components.registrar;', 'this.topologyId = await this.registrar.register(multicodec, {',
    'if (!Circuit.exactMatch(connection.remoteAddr)) {', "if (connection.direction !== 'inbound') { return; } this.upgradeInbound(connection)"
  ])
}

// A module-level memo, which the code otherwise avoids, and why: the installed packages do not change while the
// process runs, and every host asks.
let checked: PatchReport[] | undefined

/** Every patch around @libp2p/dcutr, and whether each took (applied by `punchingTcp` and `viewedDcutr`). */
export function dcutrPatches (): PatchReport[] {
  checked ??= [
    reportOf({
      name: 'punch-port',
      dependency: installed(DCUTR, LIBP2P, UTILS, TCP),
      reason: 'DCUtR\'s dials leave from a random port, not the one our public punch address names: NATed peers never get a direct connection, and their traffic stays on the relay'
    }, punchPortProblem()),
    reportOf({
      name: 'responder-role',
      dependency: installed(DCUTR, TCP, LIBP2P, YAMUX),
      reason: 'both sides of a punched connection act as its initiator, and its upgrade fails: the traffic stays on the relay'
    }, responderRoleProblem()),
    reportOf({
      name: 'punch-address',
      dependency: installed(DCUTR),
      reason: 'DCUtR offers no public address of ours (js-libp2p ignores observed TCP addresses): the peer has nothing to dial, and the traffic stays on the relay'
    }, punchAddressProblem()),
    reportOf({
      name: 'public-address-first',
      dependency: installed(DCUTR),
      reason: 'DCUtR tries to punch before we know our public address, gives up, and the connection stays relayed'
    }, publicAddressFirstProblem())
  ]
  return checked
}

function active (name: string): boolean {
  return dcutrPatches().some((report) => report.name === name && report.active)
}

/** Whether we opened a DCUtR stream on a relayed connection to the peer `ma` names: then we are DCUtR's "B", the side
 *  that answers the upgrade of the punched connection (the other one, "A", leads it). */
function openedDcutrStream (connections: Connection[], ma: Multiaddr): boolean {
  const peer = ma.getComponents().findLast(component => component.name === 'p2p')?.value
  if (peer == null) return false
  return connections.some(connection => connection.remotePeer.toString() === peer && isCircuit(connection.remoteAddr) &&
    connection.streams.some(stream => stream.protocol === DCUTR_PROTOCOL && stream.direction === 'outbound'))
}

/**
 * libp2p's TCP transport, whose hole-punching dials (DCUtR's, by their priority) leave from `port`, as the right side
 * of the upgrade. Without `punch-port` it is TCP as it is.
 */
export function punchingTcp (port: number): (components: TcpComponents) => Transport {
  return (components) => {
    const transport = tcp()(components)
    if (!active('punch-port')) return transport
    const roles = active('responder-role')
    const dial = transport.dial.bind(transport)
    transport.dial = async (ma, options) => {
      if ((options as { priority?: number }).priority !== DCUTR_DIAL_PRIORITY) return await dial(ma, options)
      const punchOptions = { ...options, localPort: port } as typeof options
      if (roles && openedDcutrStream(components.connectionManager.getConnections(), ma)) {
        // The responder: the upgrader negotiates as the answering side when told `initiator: false`, but yamux
        // takes its role from the socket's direction, which a dial always sets to outbound ("Both endpoints are
        // clients"); both are set here.
        const upgrader = options.upgrader
        Object.assign(punchOptions, {
          initiator: false,
          upgrader: withMethods(upgrader, {
            upgradeOutbound: async (maConn, upgradeOptions) => {
              Object.assign(maConn, { direction: 'inbound' })
              return await upgrader.upgradeOutbound(maConn, upgradeOptions)
            }
          })
        })
      }
      return await dial(ma, punchOptions)
    }
    return transport
  }
}

export interface DcutrViews {
  /** Addresses DCUtR offers the other side besides the host's own (`self`: our peer id, for their /p2p part). */
  addresses: (self: PeerId) => Multiaddr[]
  /** Awaited before DCUtR acts on a relayed connection it accepted; false: it leaves that connection alone. */
  beforeUpgrade: (connection: Connection) => Promise<boolean>
}

/** libp2p's DCUtR service, seeing the host's address manager (`punch-address`) and registrar (`public-address-first`)
 *  through `views`; each view only where its patch took. */
export function viewedDcutr (init: Parameters<typeof dcutr>[0], views: DcutrViews): (components: DcutrComponents) => unknown {
  return (components) => {
    const { addressManager, registrar } = components
    const replaced: Partial<DcutrComponents> = {}
    if (active('punch-address')) {
      replaced.addressManager = withMethods(addressManager, {
        getAddresses: () => [...addressManager.getAddresses(), ...views.addresses(components.peerId)]
      })
    }
    if (active('public-address-first')) {
      replaced.registrar = withMethods(registrar, {
        register: async (protocol: string, topology: Topology) => await registrar.register(protocol, {
          ...topology,
          onConnect: async (peer, connection) => {
            // DCUtR acts on the relayed connections it accepted only
            if (isCircuit(connection.remoteAddr) && connection.direction === 'inbound' && !await views.beforeUpgrade(connection)) return
            await topology.onConnect?.(peer, connection)
          }
        })
      })
    }
    return dcutr(init)(componentsView(components, replaced))
  }
}
