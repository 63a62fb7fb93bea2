import { z } from 'zod'
import { InvalidInputError } from '../errors.ts'

/**
 * Lowercase hex of 32 bytes: an Ed25519 public key names a node (its nodeID) and a PTN (its ptnID, the
 * public half of its CA key); key files hold a 32-byte seed the same way. Lowercase only, so that one key has one
 * spelling and ids compare as strings.
 */
export const HEX_32_BYTES = /^[0-9a-f]{64}$/

/** A nodeID that has been checked: only `NodeID.parse`, `parseNodeID` and `isNodeID` make one. */
export const NodeID = z.string().regex(HEX_32_BYTES, 'expected a nodeID: 64 lowercase hex characters').brand<'NodeID'>()
export type NodeID = z.infer<typeof NodeID>

export function isNodeID (value: unknown): value is NodeID {
  return typeof value === 'string' && HEX_32_BYTES.test(value)
}

/** The one validator of nodeIDs a caller hands in; `param` names the field in the InvalidInputError. */
export function parseNodeID (value: string, param = 'nodeID'): NodeID {
  if (!isNodeID(value)) throw new InvalidInputError(`Invalid ${param} ${JSON.stringify(value.slice(0, 80))}: expected a nodeID (64 lowercase hex characters)`, param)
  return value
}

/** The nodeID of a raw Ed25519 public key. */
export function nodeIDFromPublicKey (publicKey: Uint8Array): NodeID {
  if (publicKey.length !== 32) throw new TypeError(`An Ed25519 public key has 32 bytes, not ${publicKey.length}`)
  return Buffer.from(publicKey).toString('hex') as NodeID
}
