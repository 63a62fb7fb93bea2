// What meshnode assumes of @libp2p/crypto, checked here and reported (`cryptoPatches`): the node key is handed to
// libp2p as a raw Ed25519 private key, the 32-byte seed followed by the public key, which `privateKeyFromRaw` tells
// from other kinds of key by its length alone. A version that read those 64 bytes another way would give the node
// another peer id, or sign as another key, and its peers would no longer find its nodeID in its peer id. The key is
// checked each time it is made (`privateKeyFromIdentity` throws rather than start a host under another identity), and
// the report signs with a key made from a fixed seed: test/network/patches.test.ts fails, and the host warns when it
// starts (libp2p-node.ts, relay.ts). docs/UPGRADING.md lists it.
import { privateKeyFromRaw } from '@libp2p/crypto/keys'
import type { Ed25519PrivateKey } from '@libp2p/interface'
import { identityFromSeed, type NodeIdentity } from '../../../identity/index.ts'
import type { PatchReport } from '../../../system/patch-report.ts'
import { installed, reportOf } from './shape.ts'

/** The node key in libp2p's form; Ed25519's raw private key is the 32-byte seed followed by the public key. */
export function privateKeyFromIdentity (identity: NodeIdentity): Ed25519PrivateKey {
  const raw = new Uint8Array(64)
  raw.set(identity.seed, 0)
  raw.set(identity.publicKey, 32)
  const key = privateKeyFromRaw(raw)
  if (key.type !== 'Ed25519') throw new Error(`@libp2p/crypto read the node key as a ${key.type} key, not Ed25519`)
  if (!Buffer.from(key.publicKey.raw).equals(identity.publicKey)) throw new Error('@libp2p/crypto read the node key with another public key')
  return key
}

/** What `raw-ed25519-key` was written against: the key of a fixed seed signs as that seed's identity does. */
async function rawKeyProblem (): Promise<string | null> {
  const identity = identityFromSeed(new Uint8Array(32).fill(7))
  let key: Ed25519PrivateKey
  try {
    key = privateKeyFromIdentity(identity)
  } catch (err) {
    return (err as Error).message
  }
  const message = new TextEncoder().encode('meshnode node key')
  // Ed25519 signatures are deterministic: the same seed signs a message with the same bytes
  const signature = await key.sign(message)
  return Buffer.from(signature).equals(identity.sign(message)) ? null : 'a key made from the seed and public key signs as another key'
}

/** Every assumption made of @libp2p/crypto's private key format, and whether each holds. */
export async function cryptoPatches (): Promise<PatchReport[]> {
  return [reportOf({
    name: 'raw-ed25519-key',
    dependency: installed('@libp2p/crypto'),
    reason: 'the node key read another way gives the node another peer id, and its peers no longer find its nodeID in it'
  }, await rawKeyProblem())]
}
