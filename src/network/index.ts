// What other layers (the composition root, the CLI) use of the network domain. Protocol files inside src/network
// import each other directly.
// Not exported here, so that importing the network domain does not load libp2p's transports: createPeerHost
// (./libp2p-node.ts) and startRelay (./relay.ts), which the relay command and tests import from their files.
export { openStream, handleProtocol, peerIdToNodeID, nodeIDToPeerId, peerIdFromIdentity, privateKeyFromIdentity, DEFAULT_LISTEN } from './peer-ids.ts'
export type { PeerHost, PeerHostOptions, PeerHostServices } from './libp2p-node.ts'
export { relayMultiaddrFromUrl } from './relay-address.ts'
export type { RelayOptions, RelayLimits, RunningRelay } from './relay.ts'
export { WanClient } from './wan.ts'
export type { WanClientDeps, WanClientOptions, WanClientEvents, WanPeer } from './wan.ts'
export { PeerNetwork } from './peer-network.ts'
export { REACHABILITY } from './reachability-status.ts'
export type { Reachability, ReachabilityStatus } from './reachability-status.ts'
export type { PeerNetworkDeps, PeerNetworkOptions } from './peer-network.ts'
export type { PeerInfo, PeerStatus, PeerTableEvents as PeerNetworkEvents } from './peer-table.ts'
export type { PeerType } from './admission.ts'
export type { HandleOptions, RemotePeer, PeerStreamHandler } from './protocol-registry.ts'
export type { RecordPart, RecordParts } from './record-advertiser.ts'
export { CAPABILITIES_PROTOCOL, MAX_ADVERTISED_CERTIFICATES, loadedModelsOf } from './capabilities.ts'
export type { CapabilityRecord } from './capabilities.ts'
export { PeerRouter } from './router.ts'
export type { PeerRouterDeps, PeerRouterOptions, RouterNetwork, InferenceBilling } from './router.ts'
export { createInferHandler, INFER_PROTOCOL, INFER_PROTOCOL_CHAT, INFER_PROTOCOL_REASONING, MAX_INBOUND_INFER_STREAMS, RemoteInferenceError } from './infer.ts'
export type { InferHandlerDeps } from './infer.ts'
