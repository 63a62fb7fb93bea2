import { z } from 'zod'
import { HEX_32_BYTES, type NodeIdentity } from '../identity/index.ts'
import { InvalidCertificateError } from './errors.ts'
import { openDocument, sealDocument } from './signed-document.ts'

export const PTN_ROLES = ['admin', 'provider', 'consumer'] as const
export type PtnRole = typeof PTN_ROLES[number]

/** Hex of an Ed25519 public key: a nodeID, or a ptnID (the PTN's CA public key). */
export const HexKey = z.string().regex(HEX_32_BYTES, 'expected 64 lowercase hex characters')
export const PtnName = z.string().min(1).max(128)
const IsoTime = z.iso.datetime()

export const CERTIFICATE_DOMAIN = 'meshnode/ptn-certificate/v1'
/** A certificate is a few hundred characters; anything near this is not one. */
export const MAX_CERT_CHARS = 4096
/** How long a certificate is valid unless the issuer says otherwise. */
export const DEFAULT_CERTIFICATE_TTL_MS = 365 * 24 * 60 * 60_000
/** A certificate issued this far in the future is accepted: the issuer's clock may run ahead of ours. */
export const MAX_CLOCK_SKEW_MS = 5 * 60_000

/** What the CA vouches for. */
export const CertificatePayload = z.strictObject({
  ptnID: HexKey,
  ptnName: PtnName,
  nodeID: HexKey,
  role: z.enum(PTN_ROLES),
  issuedAt: IsoTime,
  expiresAt: IsoTime,
  issuerNodeID: HexKey
})
export type CertificatePayload = z.infer<typeof CertificatePayload>

export interface IssueCertificateInput {
  ptnName: string
  nodeID: string
  role: PtnRole
  /** The node that signs on the CA's behalf (it holds the CA key). */
  issuerNodeID: string
  /** @default Date.now() */
  now?: number
  /** @default DEFAULT_CERTIFICATE_TTL_MS */
  ttlMs?: number
}

/** Signs a membership certificate with the PTN's CA key; `ptnID` is that key's public half. Returns `certData`. */
export function issueCertificate (ca: NodeIdentity, input: IssueCertificateInput): string {
  const now = input.now ?? Date.now()
  const payload: CertificatePayload = {
    ptnID: ca.nodeID,
    ptnName: input.ptnName,
    nodeID: input.nodeID,
    role: input.role,
    issuedAt: new Date(now).toISOString(),
    expiresAt: new Date(now + (input.ttlMs ?? DEFAULT_CERTIFICATE_TTL_MS)).toISOString(),
    issuerNodeID: input.issuerNodeID
  }
  return sealDocument(payload, ca, CERTIFICATE_DOMAIN)
}

export interface VerifyCertificateOptions {
  /** The PTN the certificate must belong to; any PTN if omitted (its own `ptnID` is still the key checked). */
  ptnID?: string
  /** The node that must hold it: the node presenting it, or this node when joining. */
  nodeID?: string
  /** Accept an expired certificate (recover: "what survives" may have expired). @default false */
  allowExpired?: boolean
  /** @default Date.now() */
  now?: number
  /** Field named in the error. @default 'certData' */
  param?: string
}

/**
 * Decodes and verifies `certData`. The signature is checked against the certificate's `ptnID`, which *is* the CA
 * public key, never against a key the document carries beside it; a caller that knows which PTN it expects passes
 * it, so a valid certificate of another PTN is refused too. Throws `InvalidCertificateError` naming the reason.
 */
export function verifyCertificate (certData: string, options: VerifyCertificateOptions = {}): CertificatePayload {
  const param = options.param ?? 'certData'
  const document = openDocument(certData, CertificatePayload, { domain: CERTIFICATE_DOMAIN, maxChars: MAX_CERT_CHARS })
  if (document == null) throw new InvalidCertificateError(`${param} is not a meshnode PTN certificate`, 'malformed', param)
  const cert = document.payload
  if (options.ptnID != null && cert.ptnID !== options.ptnID) {
    throw new InvalidCertificateError(`Certificate belongs to PTN ${cert.ptnID}, not ${options.ptnID}`, 'wrong_ptn', param)
  }
  if (!document.signedBy(cert.ptnID)) {
    throw new InvalidCertificateError(`Certificate signature does not verify against PTN ${cert.ptnID}`, 'bad_signature', param)
  }
  if (options.nodeID != null && cert.nodeID !== options.nodeID) {
    throw new InvalidCertificateError(`Certificate was issued to node ${cert.nodeID}, not ${options.nodeID}`, 'wrong_node', param)
  }
  const now = options.now ?? Date.now()
  if (Date.parse(cert.issuedAt) > now + MAX_CLOCK_SKEW_MS) {
    throw new InvalidCertificateError(`Certificate is not valid before ${cert.issuedAt}`, 'not_yet_valid', param)
  }
  if (options.allowExpired !== true && Date.parse(cert.expiresAt) <= now) {
    throw new InvalidCertificateError(`Certificate expired at ${cert.expiresAt}`, 'expired', param)
  }
  return cert
}

/** A certificate whose form and CA signature have been checked, with its validity window in epoch milliseconds. */
export interface OpenedCertificate {
  payload: CertificatePayload
  /** `issuedAt` less MAX_CLOCK_SKEW_MS: the issuer's clock may run ahead of ours. */
  validFromMs: number
  expiresAtMs: number
}

/**
 * The part of `verifyCertificate` that never changes for one text: it decodes, and the CA its `ptnID` names signed
 * it. Null otherwise. Which node and PTN it is for, and whether it is valid now (`isValidAt`), are the caller's to
 * compare, so the signature of a certificate seen again need not be checked again.
 */
export function openCertificate (certData: string): OpenedCertificate | null {
  const document = openDocument(certData, CertificatePayload, { domain: CERTIFICATE_DOMAIN, maxChars: MAX_CERT_CHARS })
  if (document == null || !document.signedBy(document.payload.ptnID)) return null
  const payload = document.payload
  return { payload, validFromMs: Date.parse(payload.issuedAt) - MAX_CLOCK_SKEW_MS, expiresAtMs: Date.parse(payload.expiresAt) }
}

/** Whether an opened certificate is valid at `now`, as `verifyCertificate` judges it. */
export function isValidAt (cert: OpenedCertificate, now: number, options: { allowExpired?: boolean } = {}): boolean {
  return cert.validFromMs <= now && (options.allowExpired === true || now < cert.expiresAtMs)
}

/** Like `verifyCertificate`, but null instead of an error: for certificates peers present, which just count or not. */
export function checkCertificate (certData: string, options: VerifyCertificateOptions = {}): CertificatePayload | null {
  try {
    return verifyCertificate(certData, options)
  } catch (err) {
    // The one expected failure: the certificate is not valid, so it counts for nothing.
    if (err instanceof InvalidCertificateError) return null
    throw err
  }
}
