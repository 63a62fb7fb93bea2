// The models domain's own kinds of failure. Plain Error subclasses with a stable `code`: src/http/errors.ts decides
// what each one means to a client (STYLE §3).

/** The file could not be fetched: the source refused it, kept failing, or answered something we cannot use. */
export class DownloadFailedError extends Error {
  override name = 'DownloadFailedError'
  readonly code: string = 'download_failed'
  readonly url: string
  /** The last HTTP status seen, or null when the connection itself failed. */
  readonly status: number | null
  /** Requests made before giving up. */
  readonly attempts: number
  constructor (url: string, reason: string, details: { status?: number | null, attempts?: number, cause?: unknown } = {}) {
    super(`Download of ${url} failed: ${reason}`, details.cause === undefined ? undefined : { cause: details.cause })
    this.url = url
    this.status = details.status ?? null
    this.attempts = details.attempts ?? 1
  }
}

/** The source has no such repository, revision or file (HTTP 404): retrying cannot help. */
export class DownloadNotFoundError extends DownloadFailedError {
  override name = 'DownloadNotFoundError'
  override readonly code: string = 'download_not_found'
}

/** The downloaded bytes are not the ones promised: the sha256 (or the size) differs from the expected one. */
export class IntegrityError extends Error {
  override name = 'IntegrityError'
  readonly code: string = 'integrity_mismatch'
  readonly path: string
  readonly expected: string
  readonly actual: string
  constructor (path: string, what: 'sha256' | 'size', expected: string, actual: string) {
    super(`Integrity check of ${path} failed: expected ${what} ${expected}, got ${actual}`)
    this.path = path
    this.expected = expected
    this.actual = actual
  }
}

/** The file is larger than the space the caller allows it (its storage budget). */
export class DownloadTooLargeError extends Error {
  override name = 'DownloadTooLargeError'
  readonly code: string = 'download_too_large'
  /** The declared size, or the bytes received when the excess showed only while streaming. */
  readonly sizeBytes: number
  readonly maxBytes: number
  constructor (url: string, sizeBytes: number, maxBytes: number, seen: 'declared' | 'received') {
    super(seen === 'declared'
      ? `Download of ${url} refused: ${sizeBytes} bytes exceed the limit of ${maxBytes}`
      : `Download of ${url} stopped: more than the limit of ${maxBytes} bytes received`)
    this.sizeBytes = sizeBytes
    this.maxBytes = maxBytes
  }
}
