export { loadOrCreateIdentity, identityFromSeed, generateSeed, verifySignature } from './identity.ts'
export type { NodeIdentity } from './identity.ts'
export { openNodeIdentity } from './node-identity.ts'
export { NodeID, HEX_32_BYTES, isNodeID, parseNodeID, nodeIDFromPublicKey } from './node-id.ts'
