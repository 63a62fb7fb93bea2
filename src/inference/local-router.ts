import { UnavailableError } from '../errors.ts'
import type { ChatRouter, RoutedChatRequest, RoutedGeneration, RouteOptions, ServedBy } from './chat.ts'
import type { LocalEngine } from './engine.ts'

export interface LocalRouterDeps {
  engine: LocalEngine
  /** Whether two model ids name the same model (the models domain's one matcher). */
  sameModel: (a: string, b: string) => boolean
}

/**
 * Runs a request on this node's engine when its loaded model is the one asked for. The network's router wraps this
 * one and sends everything else to peers; a node with no network answers 503 for a model it does not have loaded.
 */
export class LocalRouter implements ChatRouter {
  readonly #deps: LocalRouterDeps

  constructor (deps: LocalRouterDeps) {
    this.#deps = deps
  }

  /** True when the engine has `modelID` loaded. */
  serves (modelID: string): boolean {
    const loaded = this.#deps.engine.loaded()
    return loaded != null && this.#deps.sameModel(loaded.modelID, modelID)
  }

  generate (request: RoutedChatRequest, options: RouteOptions = {}): RoutedGeneration {
    if (!this.serves(request.modelID)) {
      const loaded = this.#deps.engine.loaded()
      throw new UnavailableError(`Model ${request.modelID} is not loaded on this node and no peer serves it` +
        (loaded == null ? ' (no model is loaded)' : ` (loaded: ${loaded.modelID})`))
    }
    const events = this.#deps.engine.generate(request, { signal: options.signal, requester: options.requester })[Symbol.asyncIterator]()
    return { events, servedBy: 'local' }
  }

  models (): Array<{ modelID: string, ownedBy: ServedBy }> {
    const loaded = this.#deps.engine.loaded()
    return loaded == null ? [] : [{ modelID: loaded.modelID, ownedBy: 'local' }]
  }
}
