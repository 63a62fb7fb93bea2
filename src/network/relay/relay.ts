import { isIP } from 'node:net'
import { noise } from '@chainsafe/libp2p-noise'
import { autoNATv2 } from '@libp2p/autonat-v2'
import { circuitRelayServer, type CircuitRelayService } from '@libp2p/circuit-relay-v2'
import { identify, type Identify } from '@libp2p/identify'
import type { PeerId } from '@libp2p/interface'
import { ping, type Ping } from '@libp2p/ping'
import { tcp } from '@libp2p/tcp'
import { webSockets } from '@libp2p/websockets'
import type { Multiaddr } from '@multiformats/multiaddr'
import { createLibp2p, type Libp2p } from 'libp2p'
import { pino, type Logger } from 'pino'
import { InvalidInputError } from '../../errors.ts'
import { generateSeed, identityFromSeed } from '../../identity/index.ts'
import { warnInactivePatches } from '../../system/patch-report.ts'
import { RelayDirectory, handleDirectory } from './directory.ts'
import { CONNECTION_PING_INTERVAL_MS } from '../host/libp2p-node.ts'
import { peerIdToNodeID, privateKeyFromIdentity } from '../host/peer-ids.ts'
import { autonatV2Patches } from '../host/patches/libp2p-autonat-v2.ts'
import { cryptoPatches } from '../host/patches/libp2p-crypto.ts'
import { yamux, yamuxPatches } from '../host/patches/libp2p-yamux.ts'
import { ReachabilityMonitor } from '../host/reachability.ts'

/**
 * Limits on each relayed connection. libp2p's defaults (128 KiB, 2 min) exist for hole punching only and would cut a
 * streamed answer mid-sentence, and then the reader sees what looks like an orderly end of stream.
 */
export interface RelayLimits {
  /** Bytes, both directions together, one relayed connection may carry before the relay resets it. */
  dataBytes: bigint
  /** How long one relayed connection may stay open. (libp2p's server applies this in ms, and sends the number as is
   *  in the protocol's "seconds" field; js-libp2p clients only display it.) */
  durationMs: number
}
/** Nodes holding a reservation at once (libp2p's default is 15). */
export const RELAY_MAX_RESERVATIONS = 1024
/** Connections the relay holds at most: every node's, and the relayed ones between them. */
export const RELAY_MAX_CONNECTIONS = 4 * RELAY_MAX_RESERVATIONS
/** New connections per second from one IP before the relay refuses more (libp2p's default is 5; nodes behind one NAT,
 *  or on one test machine, share an IP and reconnect together after a relay restart). */
export const RELAY_INBOUND_CONNECTIONS_PER_SECOND = 32
/** Inbound connections in their handshakes at once (libp2p's default is 10): after a relay restart every node it served
 *  reconnects at once, and with 10 in flight on a busy machine the rest were refused, retried, and refused again. */
export const RELAY_MAX_INCOMING_PENDING_CONNECTIONS = 128

export interface RelayOptions {
  /** WebSocket port; 0 picks a free one. */
  port: number
  /** Address to listen on. @default '127.0.0.1' */
  host?: string
  /** Also listen for TCP on this port (0 picks one). @default null: WebSocket only */
  tcpPort?: number | null
  /** The relay's key seed: the same seed gives the same peer id across restarts. @default a new key per start */
  seed?: Uint8Array
  /** Multiaddrs to announce instead of the listen addresses (a public address in front of a private listener). */
  announce?: string[]
  /**
   * Limits per relayed connection; null for none. None is the default because the relay is the data path for peers
   * behind NAT: libp2p marks a connection with any limit as "limited", only protocols registered with
   * `runOnLimitedConnection` may use it, `dialProtocol(peerId)` never reuses it (it dials a new one each time), and a
   * duration limit would cut a long-lived peer connection mid-answer. Reservations still expire unless renewed.
   * @default null
   */
  limits?: RelayLimits | null
  /** Registration lifetime without renewal. @default 90_000 */
  recordTtlMs?: number
  /** New connections per second from one IP (many nodes on one test machine: raise it). @default RELAY_INBOUND_CONNECTIONS_PER_SECOND */
  inboundConnectionsPerSecond?: number
  log?: Logger
}

export interface RunningRelay {
  readonly peerId: PeerId
  readonly multiaddrs: Multiaddr[]
  /** The `wan_relay_url` nodes configure: `ws://host:port` (with the listen host; behind NAT, use the public one). */
  readonly url: string
  readonly directory: RelayDirectory
  /** Connections the relay holds now (its load: every node's, and none per relayed pair beyond the streams). */
  connections (): number
  stop (): Promise<void>
}

interface RelayServices extends Record<string, unknown> {
  identify: Identify
  ping: Ping
  relay: CircuitRelayService
}

/** Starts `meshnode relay`: a circuit relay with lifted limits, and the node directory. */
export async function startRelay (options: RelayOptions): Promise<RunningRelay> {
  const log = options.log ?? pino({ level: 'silent' })
  const host = options.host ?? '127.0.0.1'
  const ip = ipProtocol(host)
  const listen = [`/${ip}/${host}/tcp/${options.port}/ws`]
  if (options.tcpPort != null) listen.push(`/${ip}/${host}/tcp/${options.tcpPort}`)
  const identity = identityFromSeed(options.seed ?? generateSeed())
  const limits = options.limits ?? null
  // the patches of the relay's dependencies (it punches no holes: no DCUtR)
  warnInactivePatches(log, [...yamuxPatches(), ...autonatV2Patches(), ...await cryptoPatches()])
  const reachability = new ReachabilityMonitor({ log: log.child({ part: 'reachability' }) })
  const node: Libp2p<RelayServices> = await createLibp2p<RelayServices>({
    privateKey: privateKeyFromIdentity(identity),
    addresses: { listen, announce: options.announce },
    transports: [webSockets(), tcp()],
    connectionEncrypters: [noise()],
    streamMuxers: [yamux()],
    connectionManager: {
      inboundConnectionThreshold: options.inboundConnectionsPerSecond ?? RELAY_INBOUND_CONNECTIONS_PER_SECOND,
      maxConnections: RELAY_MAX_CONNECTIONS,
      maxIncomingPendingConnections: RELAY_MAX_INCOMING_PENDING_CONNECTIONS
    },
    // Its pings to the nodes fail only when really lost (as the nodes' own do): a busy machine keeps its nodes. As often
    // as the nodes ping it: every node's connection is pinged from both ends.
    connectionMonitor: { pingInterval: CONNECTION_PING_INTERVAL_MS, pingTimeout: { minTimeout: 10_000 } },
    services: {
      identify: identify(),
      ping: ping({ maxInboundStreams: 8 }),   // every node's connection monitor pings the relay too
      // AutoNAT v2 (reachability.ts): the relay dials its nodes back when they ask, and learns its own public address
      autonat: reachability.autonat(autoNATv2),
      relay: circuitRelayServer({
        reservations: limits == null
          ? { maxReservations: RELAY_MAX_RESERVATIONS, applyDefaultLimit: false }
          : { maxReservations: RELAY_MAX_RESERVATIONS, applyDefaultLimit: true, defaultDataLimit: limits.dataBytes, defaultDurationLimit: limits.durationMs }
      })
    }
  })
  try {
    const directory = new RelayDirectory(
      { isConnected: (peer) => node.getConnections(peer).length > 0 },
      { recordTtlMs: options.recordTtlMs }
    )
    await handleDirectory(node, { directory, log })
    // Port 0 picked a free port, which only the bound address tells (announce addresses are not used with port 0).
    const wsAddr = node.getMultiaddrs().find(ma => ma.getComponents().some(c => c.name === 'ws'))
    const port = options.port !== 0 ? String(options.port) : wsAddr?.getComponents().find(c => c.name === 'tcp')?.value ?? '0'
    const url = `ws://${ip === 'ip6' ? `[${host}]` : host}:${port}`
    log.info({ peerId: node.peerId.toString(), nodeID: peerIdToNodeID(node.peerId), url, addrs: node.getMultiaddrs().map(String) }, 'relay listening')
    return {
      peerId: node.peerId,
      multiaddrs: node.getMultiaddrs(),
      url,
      directory,
      connections: () => node.getConnections().length,
      stop: async () => { await node.stop() }
    }
  } catch (err) {
    await node.stop()
    throw err
  }
}

function ipProtocol (host: string): 'ip4' | 'ip6' {
  const version = isIP(host)
  if (version === 4) return 'ip4'
  if (version === 6) return 'ip6'
  throw new InvalidInputError(`Relay host must be an IP address, got ${JSON.stringify(host)}`, 'host')
}

export { relayMultiaddrFromUrl, lastPeerId } from '../host/relay-address.ts'
