// The generic kinds of failure every domain speaks in. Domain code throws these (or its own subclasses) and never
// picks an HTTP status: src/http/errors.ts maps each kind to a status and envelope, once.

/** A request field is missing, of the wrong type or out of range. `param` names the field. */
export class InvalidInputError extends Error {
  override name = 'InvalidInputError'
  readonly param: string | null
  constructor (message: string, param: string | null = null) {
    super(message)
    this.param = param
  }
}

/** An id names nothing we know: a model, PTN, key, peer or conversation. */
export class NotFoundError extends Error {
  override name = 'NotFoundError'
}

/** The current state does not allow the operation (load before download, join twice, budget full). */
export class ConflictError extends Error {
  override name = 'ConflictError'
}

/** The caller may not do this (not an admin, foreign address, foreign Origin or Host). */
export class PermissionError extends Error {
  override name = 'PermissionError'
}

/** Authentication is required and missing, unknown or revoked. `code` is `missing_api_key` or `invalid_api_key`. */
export class AuthenticationError extends Error {
  override name = 'AuthenticationError'
  readonly code: 'missing_api_key' | 'invalid_api_key'
  constructor (message: string, code: 'missing_api_key' | 'invalid_api_key') {
    super(message)
    this.code = code
  }
}

/** Too much work queued already; the caller should come back after `retryAfterSeconds`. */
export class BusyError extends Error {
  override name = 'BusyError'
  readonly retryAfterSeconds: number
  constructor (message: string, retryAfterSeconds = 1) {
    super(message)
    this.retryAfterSeconds = retryAfterSeconds
  }
}

/** Nothing can serve the request right now: no model loaded, no peer, peer unreachable. */
export class UnavailableError extends Error {
  override name = 'UnavailableError'
}

/** The disk has no room for what the request would write (a model download); freeing space would help. */
export class InsufficientStorageError extends Error {
  override name = 'InsufficientStorageError'
}

/** The request body is larger than we accept. */
export class TooLargeError extends Error {
  override name = 'TooLargeError'
}

/** The balance does not cover a send or a paid request. */
export class InsufficientCreditsError extends Error {
  override name = 'InsufficientCreditsError'
}

/** Stored state cannot be read safely (a corrupt database or key file). Never answered by replacing it. */
export class CorruptStateError extends Error {
  override name = 'CorruptStateError'
}

/**
 * What a thrown value says, for a message or a stored reason: never "undefined" or "[object Object]", whatever was
 * thrown (libp2p and its streams sometimes reject with values that are not Errors, or Errors without a message).
 */
export function errorText (err: unknown): string {
  if (err instanceof Error) {
    if (typeof err.message === 'string' && err.message.trim() !== '') return err.message
    return err.cause === undefined ? err.name : `${err.name} (${errorText(err.cause)})`
  }
  if (err == null) return 'no reason given'
  if (typeof err === 'object') {
    const { message, code } = err as { message?: unknown, code?: unknown }
    if (typeof message === 'string' && message.trim() !== '') return message
    if (typeof code === 'string') return code
    return Object.prototype.toString.call(err).slice(8, -1)
  }
  return String(err)
}
