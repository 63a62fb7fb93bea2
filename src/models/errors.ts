// The models domain's own kinds of failure, each a case of a generic kind in src/errors.ts where a client can be
// answered with it, so src/http/errors.ts maps them without knowing this domain. The download failures
// (DownloadFailedError, IntegrityError) are plain errors: downloads run in the background, so they end a download
// as status `failed` with their message, and never become an HTTP answer.
import { ConflictError, InsufficientStorageError, InvalidInputError, NotFoundError, UnavailableError } from '../errors.ts'

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

/**
 * No connection to the hub (or its file server) could even be opened: its name does not resolve, nothing listens, or
 * there is no route. Unlike a dropped connection or a 5xx, waiting does not help, so it ends a download at its first
 * failure, and the message says what the user can do instead: a machine offline still runs a GGUF it has.
 */
export class HubUnreachableError extends UnavailableError {
  override name = 'HubUnreachableError'
  readonly code: string = 'hub_unreachable'
  /** `the model hub at https://huggingface.co`, or the host of the file server it redirected to. */
  readonly where: string
  constructor (where: string, cause: string) {
    super(`Cannot reach ${where} (${cause}): use a GGUF file you already have (\`meshnode run ./model.gguf\`), ` +
      'or start the node with HF_ENDPOINT set to a mirror of the hub, or with HTTPS_PROXY and NODE_USE_ENV_PROXY=1 behind a proxy')
    this.where = where
  }
}

/** The source has no such repository, revision or file (HTTP 404): retrying cannot help. */
export class DownloadNotFoundError extends NotFoundError {
  override name = 'DownloadNotFoundError'
  readonly code: string = 'download_not_found'
  readonly url: string
  readonly status: number | null
  readonly attempts: number
  constructor (url: string, reason: string, details: { status?: number | null, attempts?: number } = {}) {
    super(`Download of ${url} failed: ${reason}`)
    this.url = url
    this.status = details.status ?? null
    this.attempts = details.attempts ?? 1
  }
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
export class DownloadTooLargeError extends ConflictError {
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

/** A model id that is malformed or unsafe (a path traversal, a control character). `param` is always `modelID`. */
export class InvalidModelIDError extends InvalidInputError {
  override name = 'InvalidModelIDError'
  constructor (modelID: string, reason: string) {
    super(`Invalid modelID ${JSON.stringify(modelID)}: ${reason}`, 'modelID')
  }
}

/** The message names the requested model identifier. */
export class ModelNotFoundError extends NotFoundError {
  override name = 'ModelNotFoundError'
  readonly modelID: string
  constructor (modelID: string, detail?: string) {
    super(`Model not found: ${modelID}${detail == null ? '' : ` (${detail})`}`)
    this.modelID = modelID
  }
}

/**
 * A model must be downloaded before it can be loaded. `state` says why it is not (never downloaded, its download
 * failed), or that its download is under way, with the fraction done where known: then the way on is to wait for it.
 */
export class ModelNotDownloadedError extends ConflictError {
  override name = 'ModelNotDownloadedError'
  readonly modelID: string
  constructor (modelID: string, state: string | { downloading: number | null }) {
    super(typeof state === 'string'
      ? `Model ${modelID} is not downloaded (${state}); download it first`
      : `Model ${modelID} is still downloading${state.downloading == null ? '' : ` (${Math.floor(state.downloading * 100)}%)`}: ` +
        `wait for it to finish (\`meshnode models download ${modelID}\` follows it)`)
    this.modelID = modelID
  }
}

/** A download would exceed `max_storage_gb` and nothing (more) may be evicted to make room. */
export class StorageBudgetError extends ConflictError {
  override name = 'StorageBudgetError'
  readonly neededBytes: number
  readonly freeBytes: number
  constructor (message: string, neededBytes: number, freeBytes: number) {
    super(message)
    this.neededBytes = neededBytes
    this.freeBytes = freeBytes
  }
}

/** A download would not fit on the disk (statfs), even after evicting what may be evicted. */
export class InsufficientDiskError extends InsufficientStorageError {
  override name = 'InsufficientDiskError'
}

/** Two model ids name the same file on the hub; the second would overwrite the first one's download. */
export class SameFileError extends ConflictError {
  override name = 'SameFileError'
}
