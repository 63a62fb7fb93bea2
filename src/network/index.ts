// What other layers (the composition root, the CLI, remote inference) use of the network domain. Its parts import
// each other directly: `host/` (the libp2p host, peer ids and streams, hole punching, reachability, relay addresses,
// yamux), `peers/` (admission, the protocol guard, the peer table, capability records, the connection policy),
// `lan/`, `wan/`, `adverts/`, and `relay/` (the `meshnode relay` program and its directory), composed by
// `peer-network.ts`.
// createPeerHost (./host/libp2p-node.ts) is not exported, and the relay is loaded only when started, so that importing
// the network domain does not load libp2p's transports; tests import createPeerHost from its file.
import type { RelayOptions, RunningRelay } from './relay/relay.ts'
export { openStream, handleProtocol, peerIdToNodeID, nodeIDToPeerId, peerIdFromIdentity, privateKeyFromIdentity, DEFAULT_LISTEN } from './host/peer-ids.ts'
export type { PeerHost, PeerHostOptions, PeerHostServices } from './host/libp2p-node.ts'
export { relayMultiaddrFromUrl } from './host/relay-address.ts'
export type { RelayOptions, RelayLimits, RunningRelay } from './relay/relay.ts'
export { WanClient } from './wan/wan.ts'
export type { WanClientDeps, WanClientOptions, WanClientEvents, WanPeer } from './wan/wan.ts'
export { PeerNetwork } from './peer-network.ts'
export { REACHABILITY } from './host/reachability-status.ts'
export type { Reachability, ReachabilityStatus } from './host/reachability-status.ts'
export type { PeerNetworkDeps, PeerNetworkOptions } from './peer-network.ts'
export type { PeerInfo, PeerStatus, PeerTableEvents as PeerNetworkEvents } from './peers/peer-table.ts'
export type { PeerType } from './peers/admission.ts'
export type { HandleOptions, RemotePeer, PeerStreamHandler } from './peers/protocol-registry.ts'
export type { RecordPart, RecordParts } from './peers/record-advertiser.ts'
export { CAPABILITIES_PROTOCOL, MAX_ADVERTISED_CERTIFICATES, MAX_ADVERTISED_DEMAND, ModelIDString, loadedModelsOf } from './peers/capabilities.ts'
export type { CapabilityRecord } from './peers/capabilities.ts'

/** Starts `meshnode relay` (./relay/relay.ts, with libp2p's relay server, loaded here and not before). */
export async function startRelay (options: RelayOptions): Promise<RunningRelay> {
  const relay = await import('./relay/relay.ts')
  return await relay.startRelay(options)
}
