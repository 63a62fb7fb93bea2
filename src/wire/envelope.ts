import { z } from 'zod'
import { NodeID, verifySignature, type NodeIdentity } from '../identity/index.ts'
import { canonicalJson } from './canonical-json.ts'
import { ProtocolError } from './errors.ts'
import { parseWith } from './frames.ts'
import { jsonDepthExceeds, MAX_MESSAGE_DEPTH } from './json-depth.ts'

// The one signed form of everything a node states to another: directory records, capability records, transfers,
// PTN requests and answers, agent messages. The signature covers the canonical JSON of `{ body, domain }`, never the
// bytes of a frame, so a re-encoded message still verifies and a stored one can be checked again.

/** A body signed by a node key. */
export interface SignedEnvelope<T = unknown> {
  body: T
  /** nodeID of the signing key. */
  signer: NodeID
  /** Base64 Ed25519 signature. */
  signature: string
}

/** Base64 of a 64-byte Ed25519 signature, as envelopes carry it. */
export const ENVELOPE_SIGNATURE = /^[A-Za-z0-9+/]{86}==$/

export const SignedEnvelope = z.object({
  /** Any JSON, its shape the protocol's; nested too deep to be walked safely, it is refused before anything walks it. */
  body: z.unknown().refine((body) => !jsonDepthExceeds(body, MAX_MESSAGE_DEPTH), `nested deeper than ${MAX_MESSAGE_DEPTH} levels`),
  signer: NodeID,
  signature: z.string().regex(ENVELOPE_SIGNATURE, 'expected a base64 Ed25519 signature')
})

/**
 * Signs the canonical JSON of `value`: the primitive under envelopes and under the PTN's documents (certificates and
 * invites, which have a text form of their own). Whatever is signed must survive a JSON round trip unchanged.
 */
export function signCanonical (identity: NodeIdentity, value: unknown): Uint8Array {
  return identity.sign(new TextEncoder().encode(canonicalJson(value)))
}

/** Whether `signature` is `publicKey`'s over the canonical JSON of `value`; false for anything malformed. */
export function verifyCanonical (publicKey: string | Uint8Array, value: unknown, signature: Uint8Array): boolean {
  let bytes: Uint8Array
  try {
    bytes = new TextEncoder().encode(canonicalJson(value))
  } catch (err) {
    // A value canonical JSON cannot write (NaN, a class instance) was never signed as it stands.
    if (err instanceof TypeError) return false
    throw err
  }
  return verifySignature(publicKey, bytes, signature)
}

export interface EnvelopeOptions {
  /**
   * What the signature is for, normally the protocol id. It is signed with the body, so a signature made for one
   * protocol can never be replayed as a message of another whose body happens to have the same shape.
   */
  domain: string
}

export function signEnvelope<T> (identity: NodeIdentity, body: T, options: EnvelopeOptions): SignedEnvelope<T> {
  return {
    body,
    signer: identity.nodeID,
    signature: Buffer.from(signCanonical(identity, { body, domain: options.domain })).toString('base64')
  }
}

export interface OpenEnvelopeOptions extends EnvelopeOptions {
  /** The nodeID that must have signed, e.g. the connection's remote peer; any valid signer if omitted. */
  expectedSigner?: string
}

/**
 * Checks an envelope's shape, its signer, its body against `schema`, then its signature, and returns the body.
 * Throws `ProtocolError` (`invalid`, `wrong_signer`, `bad_signature`) otherwise. The body's shape is checked before
 * the signature: a body JSON can carry but canonical JSON cannot sign (1e999 parses to Infinity) is then refused as
 * invalid instead of failing inside the signature check.
 */
export function openEnvelope<S extends z.ZodType> (envelope: unknown, schema: S, options: OpenEnvelopeOptions): z.output<S> {
  const { body, signer, signature } = parseWith(SignedEnvelope, envelope, 'Envelope')
  if (options.expectedSigner != null && signer !== options.expectedSigner) {
    throw new ProtocolError(`Envelope signed by ${signer}, expected ${options.expectedSigner}`, 'wrong_signer')
  }
  const parsed = parseWith(schema, body, 'Envelope body')
  if (!verifyCanonical(signer, { body, domain: options.domain }, Buffer.from(signature, 'base64'))) {
    throw new ProtocolError(`Envelope signature by ${signer} does not verify`, 'bad_signature')
  }
  return parsed
}

/** An envelope rebuilt from what was stored of it (its validated body and its signature), checked again. */
export function reopenEnvelope<S extends z.ZodType> (stored: { body: unknown, signer: string, signature: string }, schema: S, options: OpenEnvelopeOptions): SignedEnvelope<z.output<S>> {
  const body = openEnvelope(stored, schema, options)
  return { body, signer: NodeID.parse(stored.signer), signature: stored.signature }
}
