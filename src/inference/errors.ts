// The inference domain's failures, in our words, each a case of one of the generic kinds in src/errors.ts so that
// src/http/errors.ts maps them without knowing this domain.
import { BusyError, ConflictError, InvalidInputError, UnavailableError } from '../errors.ts'

/** Every slot is busy and the wait queue is full; the caller should come back after `retryAfterSeconds`. */
export class QueueFullError extends BusyError {
  override name = 'QueueFullError'
  constructor (queueSize: number, retryAfterSeconds: number) {
    super(`All inference slots are busy and ${queueSize} requests are already waiting; retry in ${retryAfterSeconds}s`, retryAfterSeconds)
  }
}

/** No model is loaded (or the one that was loaded went away while the request waited or ran). */
export class NoModelLoadedError extends UnavailableError {
  override name = 'NoModelLoadedError'
  constructor (message = 'No model is loaded') {
    super(message)
  }
}

/**
 * The request was placed on a model that is not loaded by the time it is let in (unloaded, evicted for another, or
 * idle past its keep-alive meanwhile). The router loads it and places the request again; where nothing does, it is a
 * 503 like any model that went away.
 */
export class ModelSwappedError extends UnavailableError {
  override name = 'ModelSwappedError'
  readonly wanted: string
  constructor (wanted: string, why: string) {
    super(`Model ${wanted} is not loaded (${why})`)
    this.wanted = wanted
  }
}

/**
 * A model file could not be opened, parsed or given a context: the state of the file does not allow loading it.
 * `cause` holds node-llama-cpp's error.
 */
export class ModelLoadError extends ConflictError {
  override name = 'ModelLoadError'
  readonly modelID: string
  constructor (modelID: string, message: string, options?: { cause?: unknown }) {
    super(`Cannot load model ${modelID}: ${message}`, options)
    this.modelID = modelID
  }
}

/**
 * A model that could not fit in memory even with every other model unloaded: refused before loading (a load past what
 * the machine has would swap, or end the process out of memory). Both sizes are in the message.
 */
export class ModelTooLargeError extends ConflictError {
  override name = 'ModelTooLargeError'
  readonly modelID: string
  readonly neededBytes: number
  readonly availableBytes: number
  constructor (modelID: string, neededBytes: number, availableBytes: number, what: string) {
    super(`Cannot load model ${modelID}: it needs about ${formatBytes(neededBytes)} with its context (node-llama-cpp's estimate), more than the ${formatBytes(availableBytes)} ${what}`)
    this.modelID = modelID
    this.neededBytes = neededBytes
    this.availableBytes = availableBytes
  }
}

function formatBytes (bytes: number): string {
  return bytes >= 1024 ** 3 ? `${(bytes / 1024 ** 3).toFixed(1)} GiB` : `${(bytes / 1024 ** 2).toFixed(1)} MiB`
}

/** A generation request that is well-formed JSON but cannot be served as asked. `param` names the field. */
export class InvalidGenerationRequestError extends InvalidInputError {
  override name = 'InvalidGenerationRequestError'
}

/**
 * A prompt longer than the model's context has room for. Clients act on it: Claude Code compacts its history, Codex
 * starts a new window. `promptTokens` is more than `roomTokens`, the most a prompt may take on this model.
 */
export class ContextOverflowError extends InvalidGenerationRequestError {
  override name = 'ContextOverflowError'
  readonly promptTokens: number
  readonly roomTokens: number
  constructor (message: string, param: string, tokens: { promptTokens: number, roomTokens: number }) {
    super(message, param)
    this.promptTokens = tokens.promptTokens
    this.roomTokens = tokens.roomTokens
  }
}

/**
 * The model's answer or tool call, generated under the request's grammar, breaks a keyword the grammar cannot express
 * (a number's bounds, a string's pattern: grammar-schema.ts). It is not given to the caller as valid; asking again
 * samples anew.
 */
export class OutputConstraintError extends UnavailableError {
  override name = 'OutputConstraintError'
  constructor (what: string, violation: string) {
    super(`The model's ${what} breaks its schema: ${violation}. Ask again.`)
  }
}
