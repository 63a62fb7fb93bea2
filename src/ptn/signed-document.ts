import { z } from 'zod'
import type { NodeIdentity } from '../identity/index.ts'
import { signCanonical, verifyCanonical } from '../wire/index.ts'

// The form certificates and invite codes share: base64url of the JSON `{payload, signature}`, where
// the signature is Ed25519 over the canonical JSON of `{domain, payload}`. The domain keeps a signature made for one
// kind of document from ever verifying as the other, even though one CA key signs both. The signature is the wire's
// one primitive (Ed25519 over canonical JSON); only the text form is particular to certificates and invite codes.

/** Base64url (no padding) of a 64-byte Ed25519 signature. */
const Signature = z.string().regex(/^[A-Za-z0-9_-]{86}$/, 'expected a base64url Ed25519 signature')

/** Signs `payload` and returns the document's text form. */
export function sealDocument (payload: Record<string, unknown>, signer: NodeIdentity, domain: string): string {
  const signature = Buffer.from(signCanonical(signer, { domain, payload })).toString('base64url')
  return Buffer.from(JSON.stringify({ payload, signature })).toString('base64url')
}

export interface OpenedDocument<P> {
  payload: P
  /** Whether the signature verifies against `publicKeyHex`; the caller decides which key that must be. */
  signedBy (publicKeyHex: string): boolean
}

/**
 * Decodes a document and checks its payload against `schema` (which must be strict, so that what was signed is
 * exactly what is rebuilt here). Returns null when the text is not such a document; never throws for bad input.
 */
export function openDocument<S extends z.ZodType<Record<string, unknown>>> (text: string, schema: S, options: { domain: string, maxChars: number }): OpenedDocument<z.output<S>> | null {
  const json = documentJson(text, options.maxChars)
  if (json === undefined) return null
  const parsed = z.strictObject({ payload: schema, signature: Signature }).safeParse(json)
  if (!parsed.success) return null
  const { payload, signature } = parsed.data as { payload: z.output<S>, signature: string }
  const signatureBytes = Buffer.from(signature, 'base64url')
  return { payload, signedBy: (publicKeyHex) => verifyCanonical(publicKeyHex, { domain: options.domain, payload }, signatureBytes) }
}

/**
 * A document text's JSON, unchecked: undefined for text longer than `maxChars`, not base64url, or whose bytes are no
 * JSON (malformed input, never an exception).
 */
export function documentJson (text: string, maxChars: number): unknown {
  if (text.length > maxChars || !/^[A-Za-z0-9_-]+$/.test(text)) return undefined
  try {
    return JSON.parse(Buffer.from(text, 'base64url').toString('utf8'))
  } catch (err) {
    if (err instanceof SyntaxError) return undefined
    throw err
  }
}
