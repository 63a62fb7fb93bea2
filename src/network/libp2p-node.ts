import { noise } from '@chainsafe/libp2p-noise'
import { yamux } from '@chainsafe/libp2p-yamux'
import { circuitRelayTransport } from '@libp2p/circuit-relay-v2'
import { privateKeyFromRaw, publicKeyFromRaw } from '@libp2p/crypto/keys'
import { identify, type Identify } from '@libp2p/identify'
import { isPeerId, type Connection, type Ed25519PrivateKey, type PeerId, type Stream, type StreamHandler } from '@libp2p/interface'
import { mdns } from '@libp2p/mdns'
import { peerIdFromPrivateKey, peerIdFromPublicKey } from '@libp2p/peer-id'
import { ping, type Ping } from '@libp2p/ping'
import { tcp } from '@libp2p/tcp'
import { webSockets } from '@libp2p/websockets'
import type { Multiaddr } from '@multiformats/multiaddr'
import { createLibp2p, type Libp2p } from 'libp2p'
import { pino, type Logger } from 'pino'
import { InvalidInputError } from '../errors.ts'
import type { NodeIdentity } from '../identity/index.ts'
import { ProtocolError } from './errors.ts'
import { lanPresence, type LanPresence, type LanPresenceOptions } from './lan-presence.ts'

/** Loopback only unless configured otherwise: a node is reachable from elsewhere through the relay, or by choice. */
export const DEFAULT_LISTEN = ['/ip4/127.0.0.1/tcp/0', '/ip4/127.0.0.1/tcp/0/ws']
// Listening on this makes the circuit relay transport take a reservation on any relay we connect to (WanClient
// dials the configured one), so peers can reach us at <relay>/p2p-circuit/p2p/<us> when they cannot dial us.
const RELAY_RESERVATION_LISTEN = '/p2p-circuit'

export interface PeerHostServices extends Record<string, unknown> {
  identify: Identify
  ping: Ping
  /** LAN listener and mDNS, switched on and off at run time (PeerNetwork does, for `cluster_enabled`). */
  lanPresence: LanPresence
}

/** The node's libp2p host. The composition root owns it: it is started by `createPeerHost` and stopped with `stop()`. */
export type PeerHost = Libp2p<PeerHostServices>

export interface PeerHostOptions {
  /** Multiaddrs to listen on; [] for a node reachable only through its relay. @default DEFAULT_LISTEN */
  listen?: string[]
  /** When set (WAN enabled), the node takes a reservation on the relay it connects to. @default null */
  relayUrl?: string | null
  /**
   * Take a reservation on any relay the node connects to, whether or not `relayUrl` is set: for a node whose WAN
   * setting is switched at run time (the reservation listener cannot be added to a running host cleanly).
   * @default false
   */
  relayReservations?: boolean
  /** Tunables of the LAN presence service (mDNS). */
  lan?: LanPresenceOptions
  /** Refuses connections with these peers both ways (a peer banned for misbehaving). @default none */
  denyPeer?: (peer: PeerId) => boolean
  /** LAN discovery by mDNS (CONTRACT §6 `cluster_enabled`). @default false */
  mdns?: boolean
  log?: Logger
}

/** Builds and starts the libp2p host whose peer id is the node key. */
export async function createPeerHost (identity: NodeIdentity, options: PeerHostOptions = {}): Promise<PeerHost> {
  const log = options.log ?? pino({ level: 'silent' })
  const listen = [...(options.listen ?? DEFAULT_LISTEN)]
  if (options.relayUrl != null || options.relayReservations === true) listen.push(RELAY_RESERVATION_LISTEN)
  const host = await createLibp2p<PeerHostServices>({
    privateKey: privateKeyFromIdentity(identity),
    addresses: { listen },
    transports: [tcp(), webSockets(), circuitRelayTransport()],
    connectionEncrypters: [noise()],
    streamMuxers: [yamux()],
    peerDiscovery: options.mdns === true ? [mdns()] : [],
    connectionGater: options.denyPeer == null
      ? undefined
      : { denyDialPeer: options.denyPeer, denyInboundEncryptedConnection: options.denyPeer, denyOutboundEncryptedConnection: options.denyPeer },
    services: { identify: identify(), ping: ping(), lanPresence: lanPresence(options.lan) }
  })
  log.info({ peerId: host.peerId.toString(), addrs: host.getMultiaddrs().map(String) }, 'libp2p host started')
  return host
}

/** The node key in libp2p's form; Ed25519's raw private key is the 32-byte seed followed by the public key. */
export function privateKeyFromIdentity (identity: NodeIdentity): Ed25519PrivateKey {
  const raw = new Uint8Array(64)
  raw.set(identity.seed, 0)
  raw.set(identity.publicKey, 32)
  const key = privateKeyFromRaw(raw)
  if (key.type !== 'Ed25519') throw new Error('Node key is not an Ed25519 key')
  return key
}

export function peerIdFromIdentity (identity: NodeIdentity): PeerId {
  return peerIdFromPrivateKey(privateKeyFromIdentity(identity))
}

/** The nodeID of a peer: hex of its Ed25519 public key. A peer with another kind of key is not a meshnode. */
export function peerIdToNodeID (peerId: PeerId): string {
  if (peerId.type !== 'Ed25519') throw new ProtocolError(`Peer ${peerId.toString()} has a ${peerId.type} key, not Ed25519`, 'invalid')
  return Buffer.from(peerId.publicKey.raw).toString('hex')
}

export function nodeIDToPeerId (nodeID: string): PeerId {
  if (!/^[0-9a-f]{64}$/.test(nodeID)) throw new InvalidInputError(`Invalid nodeID ${JSON.stringify(nodeID)}: expected 64 hex characters`, 'nodeID')
  return peerIdFromPublicKey(publicKeyFromRaw(Buffer.from(nodeID, 'hex')))
}

/**
 * Opens a protocol stream to a peer, on a connection we already hold if there is one. Allowed on limited (relayed)
 * connections: for a peer behind NAT the relayed connection is the only one there is.
 * (libp2p's own `dialProtocol(peerId)` never reuses a limited connection: it dials a new one every time.)
 */
export async function openStream (host: Libp2p, peer: PeerId | Multiaddr | Multiaddr[], protocol: string, options: { signal?: AbortSignal } = {}): Promise<Stream> {
  if (isPeerId(peer)) {
    const connection = bestConnection(host.getConnections(peer))
    if (connection != null) return connection.newStream(protocol, { signal: options.signal, runOnLimitedConnection: true })
  }
  return host.dialProtocol(peer, protocol, { signal: options.signal, runOnLimitedConnection: true })
}

/** An open connection, preferring unlimited ones, then direct ones. */
function bestConnection (connections: Connection[]): Connection | undefined {
  const rank = (connection: Connection): number => (connection.limits == null ? 0 : 2) + (connection.direct ? 0 : 1)
  return connections.filter(connection => connection.status === 'open').sort((a, b) => rank(a) - rank(b))[0]
}

/** Registers a protocol handler that relayed peers can reach too; `maxInboundStreams` is per connection. */
export async function handleProtocol (host: Libp2p, protocol: string, handler: StreamHandler, options: { maxInboundStreams: number }): Promise<void> {
  await host.handle(protocol, handler, { maxInboundStreams: options.maxInboundStreams, runOnLimitedConnection: true })
}
