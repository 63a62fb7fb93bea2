// What other layers (the composition root, the CLI) use of the network domain. Protocol files inside src/network
// import each other directly.
export { createPeerHost, openStream, handleProtocol, peerIdToNodeID, nodeIDToPeerId, peerIdFromIdentity, privateKeyFromIdentity, DEFAULT_LISTEN } from './libp2p-node.ts'
export type { PeerHost, PeerHostOptions, PeerHostServices } from './libp2p-node.ts'
export { startRelay, relayMultiaddrFromUrl, RELAY_MAX_RESERVATIONS } from './relay.ts'
export type { RelayOptions, RelayLimits, RunningRelay } from './relay.ts'
export { WanClient } from './wan.ts'
export type { WanClientDeps, WanClientOptions, WanClientEvents, WanPeer } from './wan.ts'
export { ProtocolError } from './errors.ts'
export type { ProtocolErrorCode } from './errors.ts'
