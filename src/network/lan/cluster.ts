import { createHmac, randomBytes, scrypt, timingSafeEqual } from 'node:crypto'
import type { PeerId, Stream } from '@libp2p/interface'
import type { Libp2p } from 'libp2p'
import { z } from 'zod'
import { ProtocolError, openFrames, readMessage, writeMessage } from '../../wire/index.ts'
import { openStream } from '../host/peer-ids.ts'

// LAN cluster admission (the `cluster_passcode` setting): two nodes found by mDNS prove to each other that they know
// the same passcode, by challenge and response over fresh nonces and both peer ids. Neither the passcode nor anything
// that could be replayed goes on the wire: each proof is an HMAC bound to this pair of nodes and these two nonces.
// The initiator proves second, and only after the responder proved first, so a stranger who dials us learns nothing
// it could reuse. (A stranger can still collect a responder's proof and guess passcodes offline: the key is derived
// with scrypt to make each guess cost; a passcode is a shared secret, choose a long one.)
export const CLUSTER_PROTOCOL = '/meshnode/cluster/1.0.0'   // new version on any wire change
export const MAX_CLUSTER_FRAME_BYTES = 1024
export const CLUSTER_READ_TIMEOUT_MS = 5_000
export const MAX_INBOUND_CLUSTER_STREAMS = 2
const NONCE_BYTES = 32
const PROOF_LABEL = 'meshnode-cluster-proof/1'
const KEY_SALT = 'meshnode-cluster-passcode/1'
// scrypt cost: paid once per passcode change and as much for every offline guess, so set as high as a passcode change
// bears without a noticeable wait (bench/README.md).
const SCRYPT_OPTIONS = { N: 2 ** 14, r: 8, p: 1, maxmem: 64 * 1024 * 1024 }

const B64_32 = z.string().regex(/^[A-Za-z0-9_-]{43}$/, 'expected 32 bytes in base64url')

const Hello = z.object({ type: z.literal('hello'), nonce: B64_32 })
const Challenge = z.discriminatedUnion('type', [
  z.object({ type: z.literal('challenge'), nonce: B64_32, proof: B64_32 }),
  z.object({ type: z.literal('refused'), reason: z.string().max(200) })
])
const Proof = z.object({ type: z.literal('proof'), proof: B64_32 })
// The explicit last frame: the initiator admits the responder only once it knows the responder admitted it.
const Verdict = z.discriminatedUnion('type', [
  z.object({ type: z.literal('welcome') }),
  z.object({ type: z.literal('refused'), reason: z.string().max(200) })
])

/** The HMAC key both sides derive from the passcode (the empty passcode too: then the cluster is open). */
export async function deriveClusterKey (passcode: string): Promise<Buffer> {
  return await new Promise((resolve, reject) => {
    scrypt(passcode.normalize('NFC'), KEY_SALT, 32, SCRYPT_OPTIONS, (err, key) => { if (err != null) reject(err); else resolve(key) })
  })
}

function proofOf (key: Buffer, role: 'initiator' | 'responder', initiator: string, responder: string, nonceI: string, nonceR: string): Buffer {
  return createHmac('sha256', key).update([PROOF_LABEL, role, initiator, responder, nonceI, nonceR].join('|')).digest()
}

function matches (expected: Buffer, received: string): boolean {
  const bytes = Buffer.from(received, 'base64url')
  return bytes.length === expected.length && timingSafeEqual(bytes, expected)
}

export interface ClusterHandlerDeps {
  /** The current key, or null while the cluster is off (then every handshake is refused). */
  key (): Promise<Buffer | null>
  localNodeID: string
  /** Called once the initiator has proven the passcode. */
  admit (nodeID: string): void
}

/** The responder's side. Returns whether the peer was admitted; a peer that does not know the passcode is not. */
export function createClusterHandler (deps: ClusterHandlerDeps): (stream: Stream, remoteNodeID: string) => Promise<boolean> {
  return async (stream, remoteNodeID) => {
    const frames = openFrames(stream, { maxFrameBytes: MAX_CLUSTER_FRAME_BYTES })
    const hello = await readMessage(frames, Hello, { timeoutMs: CLUSTER_READ_TIMEOUT_MS })
    const key = await deps.key()
    if (key == null) {
      await writeMessage(frames, { type: 'refused', reason: 'cluster is off' })
      await stream.close()
      return false
    }
    const nonce = randomBytes(NONCE_BYTES).toString('base64url')
    const proof = proofOf(key, 'responder', remoteNodeID, deps.localNodeID, hello.nonce, nonce).toString('base64url')
    await writeMessage(frames, { type: 'challenge', nonce, proof })
    const answer = await readMessage(frames, Proof, { timeoutMs: CLUSTER_READ_TIMEOUT_MS })
    const admitted = matches(proofOf(key, 'initiator', remoteNodeID, deps.localNodeID, hello.nonce, nonce), answer.proof)
    if (admitted) deps.admit(remoteNodeID)
    await writeMessage(frames, admitted ? { type: 'welcome' } : { type: 'refused', reason: 'wrong passcode' })
    await stream.close()
    return admitted
  }
}

/**
 * The initiator's side: proves the passcode to `peer` and checks its proof. Throws `ProtocolError` `refused` when
 * the peer does not know the passcode (or refuses ours, or has its cluster off).
 */
export async function joinCluster (host: Libp2p, peer: PeerId, options: { key: Buffer, localNodeID: string, remoteNodeID: string, signal?: AbortSignal }): Promise<void> {
  const stream = await openStream(host, peer, CLUSTER_PROTOCOL, { signal: options.signal })
  const frames = openFrames(stream, { maxFrameBytes: MAX_CLUSTER_FRAME_BYTES })
  try {
    const nonce = randomBytes(NONCE_BYTES).toString('base64url')
    await writeMessage(frames, { type: 'hello', nonce }, { signal: options.signal })
    const challenge = await readMessage(frames, Challenge, { timeoutMs: CLUSTER_READ_TIMEOUT_MS, signal: options.signal })
    if (challenge.type === 'refused') throw new ProtocolError(`Peer refused the cluster handshake: ${challenge.reason}`, 'refused')
    const expected = proofOf(options.key, 'responder', options.localNodeID, options.remoteNodeID, nonce, challenge.nonce)
    if (!matches(expected, challenge.proof)) throw new ProtocolError('Peer does not know the cluster passcode', 'refused')
    const proof = proofOf(options.key, 'initiator', options.localNodeID, options.remoteNodeID, nonce, challenge.nonce).toString('base64url')
    await writeMessage(frames, { type: 'proof', proof }, { signal: options.signal })
    await stream.close({ signal: options.signal })
    const verdict = await readMessage(frames, Verdict, { timeoutMs: CLUSTER_READ_TIMEOUT_MS, signal: options.signal })
    if (verdict.type === 'refused') throw new ProtocolError(`Peer refused the cluster handshake: ${verdict.reason}`, 'refused')
  } catch (err) {
    stream.abort(err instanceof Error ? err : new Error(String(err)))
    throw err
  }
}
