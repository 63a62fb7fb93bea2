import { MAX_CERT_CHARS, isValidAt, openCertificate, type CertificatePayload, type OpenedCertificate, type VerifyCertificateOptions } from './certificates.ts'
import { documentJson } from './signed-document.ts'

/**
 * Certificate texts remembered once opened. Peers choose what they present, so the memory is bounded; past it the
 * least recently checked text is forgotten and, if seen again, its signature is checked again.
 */
export const MAX_REMEMBERED_CERTIFICATES = 4096

/** What one list of certificates (a record's) proves of the node that presents it: the certificates that verified. */
interface ListProof {
  nodeID: string
  certificates: OpenedCertificate[]
}

/**
 * The certificates peers present, checked as `checkCertificate` checks them, for one signature check per certificate
 * text instead of one per look: the peer network asks which PTNs a peer proves each time it lists its peers. A text
 * never changes, so whether it decodes and its CA signed it is remembered (a forgery too); the node and PTN asked for
 * and the validity window are compared on every check, so a certificate stops counting the moment it expires.
 *
 * What a record's whole list proves is remembered with the list itself (`provenPtnIDs`), for as long as the record is
 * held: the texts alone are remembered only up to MAX_REMEMBERED_CERTIFICATES, and listing more peers than that many
 * certificates, in the same order each time, would forget each text just before it is asked for again. A certificate
 * issued to another node than the one asked about, or of another PTN than the one asked for, is passed over by what it
 * names, without a signature check: it could not count whatever its signature.
 */
export class VerifiedCertificates {
  readonly #opened = new Map<string, OpenedCertificate | null>()
  /** Keyed by the list, weakly: a list is a parsed record's and never changes, and goes with its record. */
  readonly #lists = new WeakMap<readonly string[], ListProof>()
  readonly #maxEntries: number
  readonly #now: () => number
  readonly #openText: (certData: string) => OpenedCertificate | null

  /**
   * @param options.maxEntries texts remembered. @default MAX_REMEMBERED_CERTIFICATES
   * @param options.now the clock a check without its own `now` judges validity by. @default Date.now
   * @param options.open how a text not remembered is opened: decoded, and its CA signature checked. @default openCertificate
   */
  constructor (options: { maxEntries?: number, now?: () => number, open?: (certData: string) => OpenedCertificate | null } = {}) {
    this.#maxEntries = options.maxEntries ?? MAX_REMEMBERED_CERTIFICATES
    this.#now = options.now ?? (() => Date.now())
    this.#openText = options.open ?? openCertificate
  }

  /** Like `checkCertificate`: the payload when `certData` is valid for `options` now, null when it counts for nothing. */
  check (certData: string, options: VerifyCertificateOptions = {}): CertificatePayload | null {
    if (options.ptnID != null || options.nodeID != null) {
      const names = namesOf(certData)
      if (names == null || (options.ptnID != null && names.ptnID !== options.ptnID) || (options.nodeID != null && names.nodeID !== options.nodeID)) return null
    }
    const cert = this.#open(certData)
    if (cert == null) return null
    if (options.ptnID != null && cert.payload.ptnID !== options.ptnID) return null
    if (options.nodeID != null && cert.payload.nodeID !== options.nodeID) return null
    return isValidAt(cert, options.now ?? this.#now(), { allowExpired: options.allowExpired }) ? cert.payload : null
  }

  /**
   * The PTNs `certificates`, the list a record of `nodeID` presents, prove it a member of now: each certificate
   * checked as `check` checks it for `nodeID`. The list is opened once (its texts' signatures checked the first time
   * it is asked about) and its validity windows are compared on every call.
   */
  provenPtnIDs (nodeID: string, certificates: readonly string[], now: number = this.#now()): string[] {
    let proof = this.#lists.get(certificates)
    if (proof?.nodeID !== nodeID) {
      proof = { nodeID, certificates: [] }
      for (const certData of certificates) {
        if (namesOf(certData)?.nodeID !== nodeID) continue
        const cert = this.#open(certData)
        if (cert?.payload.nodeID === nodeID) proof.certificates.push(cert)
      }
      this.#lists.set(certificates, proof)
    }
    const proven = new Set<string>()
    for (const cert of proof.certificates) if (isValidAt(cert, now)) proven.add(cert.payload.ptnID)
    return [...proven]
  }

  #open (certData: string): OpenedCertificate | null {
    const known = this.#opened.get(certData)
    if (known !== undefined) {
      // Re-inserted, so the map's order is the order of last use and the first entry the one to forget
      this.#opened.delete(certData)
      this.#opened.set(certData, known)
      return known
    }
    const opened = this.#openText(certData)
    this.#opened.set(certData, opened)
    if (this.#opened.size > this.#maxEntries) this.#opened.delete(this.#opened.keys().next().value as string)
    return opened
  }
}

/**
 * The PTN and node a certificate text names, read without checking its form or its signature (a few microseconds
 * instead of a signature check); null for a text that is no JSON document with a payload. Only ever used to pass over
 * a certificate: one that names what is asked for is opened and checked in full.
 */
function namesOf (certData: string): { ptnID: unknown, nodeID: unknown } | null {
  const document = documentJson(certData, MAX_CERT_CHARS)
  const payload: unknown = typeof document === 'object' && document !== null ? (document as { payload?: unknown }).payload : null
  if (typeof payload !== 'object' || payload === null) return null
  const { ptnID, nodeID } = payload as { ptnID?: unknown, nodeID?: unknown }
  return { ptnID, nodeID }
}
