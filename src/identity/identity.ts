import { createPrivateKey, createPublicKey, generateKeyPairSync, sign, verify, type KeyObject } from 'node:crypto'
import { existsSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { CorruptStateError } from '../errors.ts'
import { writeFileAtomic } from '../store/index.ts'
import { HEX_32_BYTES, nodeIDFromPublicKey, type NodeID } from './node-id.ts'

/** The node's one Ed25519 key: its nodeID, its libp2p peer id and its Solana address all derive from it. */
export interface NodeIdentity {
  /** Hex of the 32-byte public key. */
  readonly nodeID: NodeID
  readonly publicKey: Uint8Array
  /** The 32-byte private seed. Never logged, never sent. */
  readonly seed: Uint8Array
  sign (data: Uint8Array): Uint8Array
}

export const NODE_KEY_FILE = 'node.key'
const KEY_FILE_VERSION = 'meshnode-ed25519-v1'

// PKCS#8 DER prefix of an Ed25519 private key: lets us turn a raw 32-byte seed into a KeyObject without a library.
const PKCS8_ED25519_PREFIX = Buffer.from('302e020100300506032b657004220420', 'hex')
// SPKI DER prefix of an Ed25519 public key.
const SPKI_ED25519_PREFIX = Buffer.from('302a300506032b6570032100', 'hex')

export function privateKeyFromSeed (seed: Uint8Array): KeyObject {
  return createPrivateKey({ key: Buffer.concat([PKCS8_ED25519_PREFIX, seed]), format: 'der', type: 'pkcs8' })
}

export function publicKeyFromRaw (publicKey: Uint8Array): KeyObject {
  return createPublicKey({ key: Buffer.concat([SPKI_ED25519_PREFIX, publicKey]), format: 'der', type: 'spki' })
}

export function rawPublicKey (key: KeyObject): Uint8Array {
  return new Uint8Array(key.export({ format: 'der', type: 'spki' }).subarray(SPKI_ED25519_PREFIX.length))
}

/** Public keys kept parsed for `verifySignature`, the most recently used: about one per peer heard of. */
const VERIFY_KEY_CACHE_SIZE = 4096
const verifyKeys = new Map<string, KeyObject>()

/**
 * The parsed key for `raw` (`id`: its hex, as the caller has it), from the cache. A key is parsed (DER in, a
 * KeyObject out) once, not at every verification: parsing weighs like the verification itself, and the same few
 * hundred keys sign everything a node hears (bench/README.md).
 */
function verifyKey (id: string, raw: Uint8Array): KeyObject {
  let key = verifyKeys.get(id)
  if (key != null) {
    verifyKeys.delete(id)   // re-inserted below: a Map iterates in insertion order, so the first entry is the least recently used
  } else {
    key = publicKeyFromRaw(raw)   // throws for a string that is not a curve point: nothing cached
    if (verifyKeys.size >= VERIFY_KEY_CACHE_SIZE) verifyKeys.delete(verifyKeys.keys().next().value as string)
  }
  verifyKeys.set(id, key)
  return key
}

/** Verifies an Ed25519 signature by a hex or raw public key; false for any malformed input instead of throwing. */
export function verifySignature (publicKey: string | Uint8Array, data: Uint8Array, signature: Uint8Array): boolean {
  const raw = typeof publicKey === 'string' ? Buffer.from(publicKey, 'hex') : publicKey
  if (raw.length !== 32 || signature.length !== 64) return false
  try {
    // keyed by the hex a caller gave (a nodeID, usually) instead of encoding the key again for every check
    return verify(null, data, verifyKey(typeof publicKey === 'string' ? publicKey : Buffer.from(raw).toString('hex'), raw), signature)
  } catch (err) {
    // A 32-byte string that is not a curve point: a forged key, which is simply not a valid signature.
    if (err instanceof Error) return false
    throw err
  }
}

export function identityFromSeed (seed: Uint8Array): NodeIdentity {
  const privateKey = privateKeyFromSeed(seed)
  const publicKey = rawPublicKey(createPublicKey(privateKey))
  return {
    nodeID: nodeIDFromPublicKey(publicKey),
    publicKey,
    seed,
    sign: (data) => new Uint8Array(sign(null, data, privateKey))
  }
}

export function generateSeed (): Uint8Array {
  const { privateKey } = generateKeyPairSync('ed25519')
  const jwk = privateKey.export({ format: 'jwk' })
  return new Uint8Array(Buffer.from(jwk.d ?? '', 'base64url'))
}

/**
 * Reads the node key from the data dir, creating it (mode 0600) on first start; the relay's identity. The node's own
 * goes through `openNodeIdentity`, which also checks the key against its database. A key file that exists but cannot
 * be parsed is refused, never replaced: replacing it would silently give the node a new identity and orphan its credits.
 */
export function loadOrCreateIdentity (dataDir: string): NodeIdentity {
  const path = join(dataDir, NODE_KEY_FILE)
  if (!existsSync(path)) {
    const seed = generateSeed()
    writeKeyFile(path, seed)
    return identityFromSeed(seed)
  }
  return readKeyFile(path)
}

/** Reads a node key file; CorruptStateError when it cannot be parsed. */
export function readKeyFile (path: string): NodeIdentity {
  const [version, hex] = readFileSync(path, 'utf8').trim().split('\n')
  if (version !== KEY_FILE_VERSION || hex == null || !HEX_32_BYTES.test(hex)) {
    throw new CorruptStateError(`Node key file ${path} is unreadable; refusing to start rather than replace the node's identity`)
  }
  return identityFromSeed(new Uint8Array(Buffer.from(hex, 'hex')))
}

/** Writes a node key file atomically, readable by the owner only. */
export function writeKeyFile (path: string, seed: Uint8Array): void {
  writeFileAtomic(path, `${KEY_FILE_VERSION}\n${Buffer.from(seed).toString('hex')}\n`, 0o600)
}
