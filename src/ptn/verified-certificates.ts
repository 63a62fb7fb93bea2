import { isValidAt, openCertificate, type CertificatePayload, type OpenedCertificate, type VerifyCertificateOptions } from './certificates.ts'

/**
 * Certificate texts remembered once opened. Peers choose what they present, so the memory is bounded; past it the
 * least recently checked text is forgotten and, if seen again, its signature is checked again.
 */
export const MAX_REMEMBERED_CERTIFICATES = 4096

/**
 * The certificates peers present, checked as `checkCertificate` checks them, for one signature check per certificate
 * text instead of one per look: the peer network asks which PTNs a peer proves each time it lists its peers. A text
 * never changes, so whether it decodes and its CA signed it is remembered (a forgery too); the node and PTN asked for
 * and the validity window are compared on every check, so a certificate stops counting the moment it expires.
 */
export class VerifiedCertificates {
  readonly #opened = new Map<string, OpenedCertificate | null>()
  readonly #maxEntries: number
  readonly #now: () => number

  /**
   * @param options.maxEntries texts remembered. @default MAX_REMEMBERED_CERTIFICATES
   * @param options.now the clock a check without its own `now` judges validity by. @default Date.now
   */
  constructor (options: { maxEntries?: number, now?: () => number } = {}) {
    this.#maxEntries = options.maxEntries ?? MAX_REMEMBERED_CERTIFICATES
    this.#now = options.now ?? (() => Date.now())
  }

  /** Like `checkCertificate`: the payload when `certData` is valid for `options` now, null when it counts for nothing. */
  check (certData: string, options: VerifyCertificateOptions = {}): CertificatePayload | null {
    const cert = this.#open(certData)
    if (cert == null) return null
    if (options.ptnID != null && cert.payload.ptnID !== options.ptnID) return null
    if (options.nodeID != null && cert.payload.nodeID !== options.nodeID) return null
    return isValidAt(cert, options.now ?? this.#now(), { allowExpired: options.allowExpired }) ? cert.payload : null
  }

  #open (certData: string): OpenedCertificate | null {
    const known = this.#opened.get(certData)
    if (known !== undefined) {
      // Re-inserted, so the map's order is the order of last use and the first entry the one to forget
      this.#opened.delete(certData)
      this.#opened.set(certData, known)
      return known
    }
    const opened = openCertificate(certData)
    this.#opened.set(certData, opened)
    if (this.#opened.size > this.#maxEntries) this.#opened.delete(this.#opened.keys().next().value as string)
    return opened
  }
}
