import { InvalidInputError, NotFoundError, UnavailableError } from '../errors.ts'
import { parseModelID } from '../models/index.ts'
import type { ChatRequest, ChatRouter, InferenceEvent, ModelListing, RoutedGeneration, RoutedRequest, RouteOptions } from './chat.ts'
import type { LocalEngine } from './engine.ts'
import { ModelSwappedError } from './errors.ts'

/** A model file on this node, as the models domain knows it. */
export interface LocalModel {
  modelID: string
  status: 'downloading' | 'downloaded' | 'loaded' | 'failed'
  /** For a download in progress: how far it is, 0..1, if known. */
  fraction?: number | null
}

/** What the router asks of the models domain: which models are on disk, and loading one into the engine. */
export interface LocalModels {
  /** The model this id names on this node (any spelling `sameModel` accepts), or null. */
  find (modelID: string): LocalModel | null
  /** Every model on this node that can be loaded now. */
  loadable (): LocalModel[]
  /** Loads a downloaded model for a request, beside those loaded (evicting an idle one if it must). */
  load (modelID: string): Promise<void>
}

export interface LocalRouterDeps {
  engine: LocalEngine
  /** Whether two model ids name the same model (the models domain's one matcher). */
  sameModel: (a: string, b: string) => boolean
  /** Models on disk, loaded on first use. Without it only the loaded model is served. */
  models?: LocalModels
}

/** Times one request may find its model unloaded between its load and its admission before it gives up (models evicting each other). */
const MAX_SWAPS_PER_REQUEST = 3

/**
 * Runs a request on this node's engine: on a loaded model, or on a downloaded one, which it loads first beside the
 * others (as Ollama and LM Studio do). The network's router wraps this one and sends everything else to peers.
 */
export class LocalRouter implements ChatRouter {
  readonly #deps: LocalRouterDeps
  /** Loads started for requests, by model id, so that ten requests for one model load it once. */
  readonly #loads = new Map<string, Promise<void>>()

  constructor (deps: LocalRouterDeps) {
    this.#deps = deps
  }

  /** True when `modelID` is loaded, or downloaded here and so loaded on first use. */
  serves (modelID: string): boolean {
    return this.#loadedAs(modelID) != null || this.#deps.models?.find(modelID)?.status === 'downloaded'
  }

  /**
   * Places the request on this node. NotFoundError when the model is not here; UnavailableError while it is still
   * downloading or its download failed.
   */
  route (request: RoutedRequest, options: RouteOptions = {}): RoutedGeneration {
    if (!this.serves(request.modelID)) throw this.notServed(request.modelID)
    return { events: this.#run(request, options), servedBy: 'local' }
  }

  /**
   * Why this node cannot serve `modelID`, as the error the caller should see; `peers` says what the network found
   * (e.g. " and no peer serves it").
   */
  notServed (modelID: string, peers = ''): Error {
    const found = this.#deps.models?.find(modelID)
    if (found?.status === 'downloading') {
      const percent = found.fraction == null ? '' : ` (${Math.floor(found.fraction * 100)}%)`
      return new UnavailableError(`Model ${found.modelID} is still downloading on this node${percent}${peers}`)
    }
    if (found?.status === 'failed') {
      return new UnavailableError(`Model ${found.modelID} failed to download on this node${peers}; download it again with \`meshnode models download ${found.modelID}\``)
    }
    const loaded = this.#deps.engine.loadedModels().map((model) => model.modelID)
    return new NotFoundError(`Model ${modelID} is not on this node${peers} (${loaded.length === 0 ? 'no model is loaded' : `loaded: ${loaded.join(', ')}`}); ` +
      howToGetModel(modelID))
  }

  /** Tokens of `text` in the model's vocabulary; the model is loaded first if it is only downloaded. */
  async tokenize (modelID: string, text: string, options: { addSpecial?: boolean, signal?: AbortSignal } = {}): Promise<number[]> {
    const loadedID = await this.#ready(modelID, options.signal)
    return await this.#deps.engine.tokenize(text, { addSpecial: options.addSpecial, modelID: loadedID, signal: options.signal })
  }

  /** The input tokens a chat request takes on the model (loaded first if it is only downloaded). */
  async countChatTokens (request: ChatRequest & { modelID: string }, options: { signal?: AbortSignal } = {}): Promise<number> {
    const loadedID = await this.#ready(request.modelID, options.signal)
    return await this.#deps.engine.countChatTokens(request, { modelID: loadedID, signal: options.signal })
  }

  async detokenize (modelID: string, tokens: number[], options: { signal?: AbortSignal } = {}): Promise<string> {
    const loadedID = await this.#ready(modelID, options.signal)
    return this.#deps.engine.detokenize(tokens, { modelID: loadedID })
  }

  models (): ModelListing[] {
    const loaded = this.#deps.engine.loadedModels().map((model) => model.modelID)
    const listed: ModelListing[] = loaded.map((modelID) => ({ modelID, ownedBy: 'local', loaded: true }))
    for (const model of this.#deps.models?.loadable() ?? []) {
      if (!loaded.some((id) => this.#deps.sameModel(id, model.modelID))) listed.push({ modelID: model.modelID, ownedBy: 'local', loaded: false })
    }
    return listed
  }

  async * #run (request: RoutedRequest, options: RouteOptions): AsyncGenerator<InferenceEvent, void, undefined> {
    for (let swaps = 0; ; swaps++) {
      const loadedID = await this.#ready(request.modelID, options.signal)
      try {
        // The engine checks, when it lets the request in, that the model is still loaded.
        yield * this.#deps.engine.serve(request, { signal: options.signal, requester: options.requester, modelID: loadedID })
        return
      } catch (err) {
        // Thrown on admission, before any event: safe to place the request again.
        if (err instanceof ModelSwappedError && swaps < MAX_SWAPS_PER_REQUEST) continue
        throw err
      }
    }
  }

  /** Loads `modelID` if it is not loaded; returns the id the engine has it under. */
  async #ready (modelID: string, signal: AbortSignal | undefined): Promise<string> {
    for (let swaps = 0; ; swaps++) {
      signal?.throwIfAborted()
      const loadedID = this.#loadedAs(modelID)
      if (loadedID != null) return loadedID
      const found = this.#deps.models?.find(modelID)
      if (found?.status !== 'downloaded' || swaps >= MAX_SWAPS_PER_REQUEST) throw this.notServed(modelID)
      await this.#load(found.modelID)
    }
  }

  #loadedAs (modelID: string): string | null {
    if (this.#deps.engine.loaded(modelID) != null) return modelID
    return this.#deps.engine.loadedModels().find((model) => this.#deps.sameModel(model.modelID, modelID))?.modelID ?? null
  }

  async #load (modelID: string): Promise<void> {
    const key = modelID.toLowerCase()
    let loading = this.#loads.get(key)
    if (loading == null) {
      const models = this.#deps.models
      if (models == null) throw this.notServed(modelID)
      loading = models.load(modelID).finally(() => { this.#loads.delete(key) })
      this.#loads.set(key, loading)
    }
    await loading
  }
}

/**
 * What the user can do about a model nobody serves: download it, when the catalog or the hub can resolve the id; for
 * any other name a download would only fail with "Model not found", so point at the list of models there are.
 */
export function howToGetModel (modelID: string): string {
  let downloadable: boolean
  try {
    downloadable = parseModelID(modelID).kind !== 'name'
  } catch (err) {
    if (!(err instanceof InvalidInputError)) throw err
    downloadable = false // not even a well-formed id (`acme/model`): nothing to download by that name
  }
  return downloadable
    ? `download it with \`meshnode models download ${modelID}\``
    : 'it is neither a catalog id nor a Hugging Face file (hf.co/<org>/<repo>/<file>.gguf): `meshnode models list` shows the models you can download'
}
