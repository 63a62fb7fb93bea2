// Every patch meshnode makes around @libp2p/autonat-v2, applied here and reported (`autonatV2Patches`): autonat-v2 is
// handed views of the host's components (its registrar, address manager, connection manager and logger) that let
// reachability.ts see what the package reports nowhere else and limit what it does. The policy (what counts as
// private, how many dial-backs at once) is reachability.ts's; this file knows which calls autonat-v2 makes.
//
// Each patch checks the shape it was written for (the calls autonat-v2 makes on its components, the log line it
// writes, the protocol id it builds) and, finding another, leaves autonat-v2's view of that component as it is and
// reports what it found: the host warns when it starts (libp2p-node.ts, relay.ts), and test/network/patches.test.ts
// fails. docs/UPGRADING.md lists each patch with its check.
import type { AutoNATv2Components, AutoNATv2ServiceInit, autoNATv2 } from '@libp2p/autonat-v2'
import type { Connection, Logger as Libp2pLogger } from '@libp2p/interface'
import type { PatchReport } from '../../../system/patch-report.ts'
import { firstProblem, installed, missingText, reportOf } from './shape.ts'
import { componentsView, withMethods } from './views.ts'

/** AutoNAT v2's dial-request protocol (autonat-v2's default prefix): a request to be dialed back, either way. */
export const AUTONAT_DIAL_REQUEST_PROTOCOL = '/libp2p/autonat/2/dial-request'

/** The autonat-v2 client's logger, and its trace line for one failed dial-back (client.js). */
const CLIENT_LOGGER = 'libp2p:auto-nat-v2:client'
const DIAL_BACK_FAILED = '%p could not dial %a'

const AUTONAT = '@libp2p/autonat-v2'
const CLIENT = 'dist/src/client.js'
const SERVER = 'dist/src/server.js'

type Handler = Parameters<AutoNATv2Components['registrar']['handle']>[1]
type AddressWithMetadata = ReturnType<AutoNATv2Components['addressManager']['getAddressesWithMetadata']>[number]

function dialBackFailuresProblem (): string | null {
  return missingText(AUTONAT, CLIENT, [
    `this.log = components.logger.forComponent('${CLIENT_LOGGER}');`,
    `this.log.trace('${DIAL_BACK_FAILED}', connection.remotePeer, results.multiaddr);`
  ])
}

function addressViewProblem (): string | null {
  return missingText(AUTONAT, CLIENT, [
    'this.components = components;',
    'const addrs = this.components.addressManager.getAddressesWithMetadata()',
    'this.components.addressManager.confirmObservedAddr(results.multiaddr);',
    'this.components.addressManager.removeObservedAddr(results.multiaddr);'
  ])
}

function dialBackLimitProblem (): string | null {
  return missingText(AUTONAT, SERVER, [
    'this.components = components;',
    'const isDialable = await this.components.connectionManager.isDialable(ma, {',
    'connection = await this.components.connectionManager.openConnection(ma, { force: true, ...options });'
  ])
}

function dialBackTrackingProblem (): string | null {
  return firstProblem([
    // the protocol id, as autonat-v2 builds it from its constants
    () => missingText(AUTONAT, 'dist/src/autonat.js', ['const dialRequestProtocol = `/${init.protocolPrefix ?? PROTOCOL_PREFIX}/${PROTOCOL_NAME}/${PROTOCOL_VERSION}/${DIAL_REQUEST}`;']),
    () => {
      const [, prefix, name, version, request] = AUTONAT_DIAL_REQUEST_PROTOCOL.split('/')
      return missingText(AUTONAT, 'dist/src/constants.js', [
        `PROTOCOL_PREFIX = '${prefix}';`, `PROTOCOL_NAME = '${name}';`, `PROTOCOL_VERSION = '${version}';`, `DIAL_REQUEST = '${request}';`
      ])
    },
    // the server answers a request in the handler it registers; the client asks on the connection its topology is told of
    () => missingText(AUTONAT, SERVER, ['await this.components.registrar.handle(this.dialRequestProtocol, this.handleDialRequestStream, {']),
    () => missingText(AUTONAT, CLIENT, [
      'this.topologyId = await this.components.registrar.register(this.dialRequestProtocol, { onConnect: (peerId, connection) => { this.verifyExternalAddresses(connection)',
      'await this.askPeerToVerify(connection, segment, nonce, options);',
      'const stream = await connection.newStream(this.dialRequestProtocol, options);'
    ])
  ])
}

// A module-level memo, which the code otherwise avoids, and why: the installed packages do not change while the
// process runs, and every host asks.
let checked: PatchReport[] | undefined

/** Every patch around @libp2p/autonat-v2, and whether each took (applied by `viewedAutonatV2`). */
export function autonatV2Patches (): PatchReport[] {
  const dependency = installed(AUTONAT)
  checked ??= [
    reportOf({
      name: 'dial-back-failures',
      dependency,
      reason: 'autonat-v2 reports a single failed dial-back only in its log: a node in a small network never learns that it is private'
    }, dialBackFailuresProblem()),
    reportOf({
      name: 'address-view',
      dependency,
      reason: 'autonat-v2 asks peers to dial our circuit addresses (a relay refuses, and the client stops reading the answers after it), and a change of reachability goes unlogged'
    }, addressViewProblem()),
    reportOf({
      name: 'dial-back-limit',
      dependency,
      reason: 'a relay that all its nodes ask at once dials them all back at once: a dial storm'
    }, dialBackLimitProblem()),
    reportOf({
      name: 'dial-back-tracking',
      dependency,
      reason: 'the connection policy takes a dial-back for a duplicate connection and closes it: the dial-back fails, or a node\'s relay connection is cut'
    }, dialBackTrackingProblem())
  ]
  return checked
}

function active (name: string): boolean {
  return autonatV2Patches().some((report) => report.name === name && report.active)
}

/** What reachability.ts is told of, and decides, through autonat-v2's views of the components. */
export interface AutonatViews {
  /** Whether autonat-v2 may test `address` of ours (`address-view`). */
  testable: (address: AddressWithMetadata) => boolean
  /** autonat-v2 confirmed or removed an observed address of ours (`address-view`). */
  addressesChanged: () => void
  /** A peer could not dial us back at `address` (`dial-back-failures`). */
  dialBackFailed: (address: string) => void
  /** Whether the server may take on another dial-back now (`dial-back-limit`). */
  mayDialBack: () => boolean
  /** Runs one dial-back of the server (`dial-back-limit`). */
  dialingBack: <T>(dial: () => Promise<T>) => Promise<T>
  /** Runs the server's answer to `peer`'s dial request, in which it may dial `peer` back (`dial-back-tracking`). */
  answering: (peer: string, answer: () => Promise<void>) => Promise<void>
  /** The client is asking `peer` to dial it back (`dial-back-tracking`). */
  asking: (peer: string) => void
}

/** autonat-v2's service (`factory`, with `init`), seeing the host's components through `views`; each view only where
 *  its patch took. */
export function viewedAutonatV2 (factory: typeof autoNATv2, init: AutoNATv2ServiceInit, views: AutonatViews): (components: AutoNATv2Components) => unknown {
  return (components) => {
    const { addressManager, connectionManager, logger, registrar } = components
    const replaced: Partial<AutoNATv2Components> = {}
    if (active('address-view')) {
      replaced.addressManager = withMethods(addressManager, {
        getAddressesWithMetadata: () => addressManager.getAddressesWithMetadata().filter(views.testable),
        confirmObservedAddr: (addr, options) => { addressManager.confirmObservedAddr(addr, options); views.addressesChanged() },
        removeObservedAddr: (addr) => { addressManager.removeObservedAddr(addr); views.addressesChanged() }
      })
    }
    if (active('dial-back-limit')) {
      replaced.connectionManager = withMethods(connectionManager, {
        isDialable: async (addrs, options) => views.mayDialBack() && await connectionManager.isDialable(addrs, options),
        // the server dials back with `force` (a new connection even though one is open); nothing else here does
        openConnection: async (peer, options) => options?.force === true
          ? await views.dialingBack(async () => await connectionManager.openConnection(peer, options))
          : await connectionManager.openConnection(peer, options)
      })
    }
    if (active('dial-back-tracking')) {
      const answering = (handler: Handler): Handler => async (stream, connection) => {
        await views.answering(connection.remotePeer.toString(), async () => { await handler(stream, connection) })
      }
      const asking = (connection: Connection): Connection => withMethods(connection, {
        newStream: async (protocols, options) => {
          if ([protocols].flat().includes(AUTONAT_DIAL_REQUEST_PROTOCOL)) views.asking(connection.remotePeer.toString())
          return await connection.newStream(protocols, options)
        }
      })
      replaced.registrar = withMethods(registrar, {
        handle: async (protocol, handler, options) => {
          await registrar.handle(protocol, protocol === AUTONAT_DIAL_REQUEST_PROTOCOL ? answering(handler) : handler, options)
        },
        register: async (protocol, topology) => await registrar.register(protocol, protocol !== AUTONAT_DIAL_REQUEST_PROTOCOL
          ? topology
          : { ...topology, onConnect: async (peer, connection) => { await topology.onConnect?.(peer, asking(connection)) } })
      })
    }
    if (active('dial-back-failures')) {
      const tap = (log: Libp2pLogger): Libp2pLogger => withMethods(log, {
        trace: (formatter: unknown, ...args: unknown[]) => {
          log.trace(formatter, ...args)
          if (formatter === DIAL_BACK_FAILED) views.dialBackFailed(String(args[1]))   // (peer, our address)
        }
      })
      replaced.logger = { forComponent: (name) => name === CLIENT_LOGGER ? tap(logger.forComponent(name)) : logger.forComponent(name) }
    }
    return factory(init)(componentsView(components, replaced))
  }
}
