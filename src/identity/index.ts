export { loadOrCreateIdentity, identityFromSeed, generateSeed, verifySignature } from './identity.ts'
export type { NodeIdentity } from './identity.ts'
