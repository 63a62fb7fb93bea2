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
export type { PeerNetworkDeps, PeerNetworkOptions, PeerNetworkEvents, PeerInfo, PeerType, PeerStatus, CapabilityProviders, HandleOptions, RemotePeer, PeerStreamHandler, JsonValue } from './peer-network.ts'
export { CAPABILITIES_PROTOCOL } from './capabilities.ts'
export { PeerRouter } from './router.ts'
export { DemandDrivenModels } from './demand-driven-models.ts'
export type { DemandDrivenModelsDeps, DemandDrivenModelsOptions, DemandDecision } from './demand-driven-models.ts'
export type { PeerRouterDeps, PeerRouterOptions, RouterNetwork, InferenceBilling } from './router.ts'
export { createInferHandler, INFER_PROTOCOL, MAX_INBOUND_INFER_STREAMS, RemoteInferenceError } from './infer.ts'
export type { InferHandlerDeps } from './infer.ts'
export type { CapabilityRecord } from './capabilities.ts'

