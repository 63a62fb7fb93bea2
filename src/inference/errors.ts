// The inference domain's failures, in our words. Each extends Error for now; the lead re-parents them onto the
// generic kinds of src/errors.ts (BusyError, UnavailableError, InvalidInputError) so src/http/errors.ts maps them.

/** Every slot is busy and the wait queue is full; the caller should come back after `retryAfterSeconds`. */
export class QueueFullError extends Error {
  override name = 'QueueFullError'
  readonly retryAfterSeconds: number
  constructor (queueSize: number, retryAfterSeconds: number) {
    super(`All inference slots are busy and ${queueSize} requests are already waiting; retry in ${retryAfterSeconds}s`)
    this.retryAfterSeconds = retryAfterSeconds
  }
}

/** No model is loaded (or the one that was loaded went away while the request waited or ran). */
export class NoModelLoadedError extends Error {
  override name = 'NoModelLoadedError'
  constructor (message = 'No model is loaded') {
    super(message)
  }
}

/** A model file could not be opened, parsed or given a context. `cause` holds node-llama-cpp's error. */
export class ModelLoadError extends Error {
  override name = 'ModelLoadError'
  readonly modelID: string
  constructor (modelID: string, message: string, options?: { cause?: unknown }) {
    super(`Cannot load model ${modelID}: ${message}`, options)
    this.modelID = modelID
  }
}

/** A generation request that is well-formed JSON but cannot be served as asked. `param` names the field. */
export class InvalidGenerationRequestError extends Error {
  override name = 'InvalidGenerationRequestError'
  readonly param: string | null
  constructor (message: string, param: string | null = null) {
    super(message)
    this.param = param
  }
}
