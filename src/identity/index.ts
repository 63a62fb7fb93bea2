export { loadOrCreateIdentity, identityFromSeed, generateSeed, verifySignature, privateKeyFromSeed, publicKeyFromRaw, NODE_KEY_FILE } from './identity.ts'
export type { NodeIdentity } from './identity.ts'
