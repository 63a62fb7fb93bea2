// The light half of our libp2p glue: peer ids from node keys and back, and opening or serving protocol streams on a
// host. Importing it does not load libp2p's transports, so a node with networking off never pays for them; the host
// itself is built by libp2p-node.ts, loaded when the network first starts.
import { publicKeyFromRaw } from '@libp2p/crypto/keys'
import { isPeerId, type Connection, type PeerId, type Stream, type StreamHandler } from '@libp2p/interface'
import { peerIdFromPrivateKey, peerIdFromPublicKey } from '@libp2p/peer-id'
import type { Multiaddr } from '@multiformats/multiaddr'
import type { Libp2p } from 'libp2p'
import { nodeIDFromPublicKey, parseNodeID, type NodeID, type NodeIdentity } from '../../identity/index.ts'
import { ProtocolError } from '../../wire/index.ts'
import { privateKeyFromIdentity } from './patches/libp2p-crypto.ts'

export { privateKeyFromIdentity }

/** Where a node listens by default: loopback TCP and WebSocket on free ports. */
export const DEFAULT_LISTEN = ['/ip4/127.0.0.1/tcp/0', '/ip4/127.0.0.1/tcp/0/ws']

/** Where the LAN listener listens while `cluster_enabled` is on: every interface, a free port. */
export const DEFAULT_LAN_LISTEN = ['/ip4/0.0.0.0/tcp/0']

export function peerIdFromIdentity (identity: NodeIdentity): PeerId {
  return peerIdFromPrivateKey(privateKeyFromIdentity(identity))
}

/** The nodeID of a peer: hex of its Ed25519 public key. A peer with another kind of key is not a meshnode. */
export function peerIdToNodeID (peerId: PeerId): NodeID {
  if (peerId.type !== 'Ed25519') throw new ProtocolError(`Peer ${peerId.toString()} has a ${peerId.type} key, not Ed25519`, 'invalid')
  return nodeIDFromPublicKey(peerId.publicKey.raw)
}

export function nodeIDToPeerId (nodeID: string): PeerId {
  return peerIdFromPublicKey(publicKeyFromRaw(Buffer.from(parseNodeID(nodeID), 'hex')))
}

/**
 * Opens a protocol stream to a peer, on a connection we already hold if there is one. Allowed on limited (relayed)
 * connections: for a peer behind NAT the relayed connection is the only one there is.
 * (libp2p's own `dialProtocol(peerId)` never reuses a limited connection: it dials a new one every time.)
 */
export async function openStream (host: Libp2p, peer: PeerId | Multiaddr | Multiaddr[], protocol: string | string[], options: { signal?: AbortSignal } = {}): Promise<Stream> {
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
