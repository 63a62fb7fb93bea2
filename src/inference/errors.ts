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
 * The request was placed on one model, and another was loaded by the time it was let in (a swap for another request
 * happened meanwhile). The router places it again; where nothing does, it is a 503 like any model that went away.
 */
export class ModelSwappedError extends UnavailableError {
  override name = 'ModelSwappedError'
  readonly wanted: string
  constructor (wanted: string, loaded: string) {
    super(`Model ${wanted} is no longer loaded (${loaded} was swapped in)`)
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

/** A generation request that is well-formed JSON but cannot be served as asked. `param` names the field. */
export class InvalidGenerationRequestError extends InvalidInputError {
  override name = 'InvalidGenerationRequestError'
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
