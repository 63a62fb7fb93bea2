// Which models the engine holds: loading one beside the others, unloading one or all, what to show while a load
// runs, the models to load again at the next start, and "last used" for disk eviction, marked in memory on every
// chat and written in batches (ModelRecords.flushUsage).
import type { EventEmitter } from 'node:events'
import type { Logger } from 'pino'
import { InvalidInputError } from '../errors.ts'
import type { ModelEventMap } from './events.ts'
import { modelKey } from './model-id.ts'
import type { LoadedState, ModelRecords } from './records.ts'

/** How a model came to be loaded: asked for (`load`, `serve --model`: stays until unloaded), or by a request naming it. */
export type LoadReason = 'explicit' | 'request'
/** Why a model left memory. */
export type UnloadReason = 'explicit' | 'evicted' | 'idle' | 'closing'

/** A model in the engine, as the engine describes it. */
export interface EngineModel {
  readonly modelID: string
  readonly path: string
  readonly kind: 'chat' | 'embedding'
  readonly memoryBytes: number
  readonly contextLength: number
  readonly trainContextLength: number
  readonly slots: number
  readonly backend: string
  readonly gpuLayers: number
  readonly totalLayers: number
}

/** A loaded model with what it is doing. */
export interface EngineModelState extends EngineModel {
  readonly loadedBy: LoadReason
  readonly busySlots: number
  readonly queued: number
  readonly idleMs: number
}

/** The part of LocalEngine the store drives. */
export interface ModelEngine {
  load: (modelID: string, path: string, options?: { reason?: LoadReason }) => Promise<EngineModel>
  unload: (modelID?: string) => Promise<string[]>
  loaded: (modelID?: string) => EngineModel | null
  loadedModels: () => EngineModelState[]
  on: ((event: 'loaded', listener: (event: { info: EngineModel, reason: LoadReason }) => void) => unknown) &
    ((event: 'unloaded', listener: (event: { modelID: string, reason: UnloadReason }) => void) => unknown)
}

/** The model the engine holds (the one used most recently), for the /v1/app snapshot's `model`. */
export interface LoadedModel {
  modelID: string
  status: 'loaded' | 'loading'
  contextLength: number | null
  /** Where it runs (`cpu` or the GPU backend) and how many of its layers the GPU holds; null while loading. */
  gpu: { backend: string, gpuLayers: number, totalLayers: number } | null
}

export interface ModelLoaderDeps {
  engine: ModelEngine
  records: ModelRecords
  events: EventEmitter<ModelEventMap>
  log: Logger
}

/** A model ready to load: its key, its id as listed, and its file's absolute path. */
export interface LoadableModel {
  key: string
  modelID: string
  path: string
}

export class ModelLoader {
  readonly #deps: ModelLoaderDeps
  /** Loads in progress, by key, with the id they load. */
  readonly #loading = new Map<string, string>()

  constructor (deps: ModelLoaderDeps) {
    this.#deps = deps
    // Every load and unload the engine makes, whoever asked (a request, an eviction, the keep-alive), is announced once
    deps.engine.on('loaded', ({ info, reason }) => {
      deps.events.emit('model.loaded', { modelID: info.modelID, contextLength: info.contextLength, reason })
    })
    deps.engine.on('unloaded', ({ modelID, reason }) => {
      deps.events.emit('model.unloaded', { modelID, reason })
    })
  }

  /**
   * Loads a model into the engine beside those loaded (evicting as the engine decides); one loaded explicitly is
   * remembered as one to load again at the next start.
   */
  async load (model: LoadableModel, options: { reason?: LoadReason } = {}): Promise<{ modelID: string, status: 'loaded', contextLength: number }> {
    const { key, modelID, path } = model
    const reason = options.reason ?? 'explicit'
    const held = this.#deps.engine.loaded(modelID)
    if (held?.path !== path) this.#loading.set(key, modelID)
    let info: EngineModel
    try {
      info = await this.#deps.engine.load(modelID, path, { reason })
    } finally {
      this.#loading.delete(key)
    }
    this.#deps.records.markLoaded(key, info.trainContextLength, reason === 'explicit')
    return { modelID, status: 'loaded', contextLength: info.contextLength }
  }

  /**
   * Unloads one model (by its id as loaded), or every model when none is named, once their requests in flight have
   * finished, and forgets them as models to load at start. Returns the ids unloaded.
   */
  async unload (modelID?: string): Promise<string[]> {
    const unloaded = await this.#deps.engine.unload(modelID)
    if (modelID == null) this.#deps.records.forgetLoaded()
    for (const id of unloaded) {
      const key = keyOf(id)
      if (key != null) this.#deps.records.forgetLoaded(key)
    }
    return unloaded
  }

  /** The id the engine has `modelID` loaded under (any spelling of ours), or null. */
  loadedAs (modelID: string): string | null {
    const key = keyOf(modelID) ?? modelID.toLowerCase()
    return this.#deps.engine.loadedModels().find((model) => (keyOf(model.modelID) ?? model.modelID.toLowerCase()) === key)?.modelID ?? null
  }

  /** A model being loaded, else the one used most recently, for the snapshot's `model`: what was asked for last. */
  loadedModel (): LoadedModel | null {
    const loading = [...this.#loading.values()].at(-1)
    if (loading != null) return { modelID: loading, status: 'loading', contextLength: null, gpu: null }
    const info = this.#deps.engine.loaded()
    if (info == null) return null
    return { modelID: info.modelID, status: 'loaded', contextLength: info.contextLength, gpu: { backend: info.backend, gpuLayers: info.gpuLayers, totalLayers: info.totalLayers } }
  }

  /** What each loaded model is doing, by key (an id that is not ours — a test's path — keyed by its lower case). */
  loadedStates (): Map<string, LoadedState> {
    const states = new Map<string, LoadedState>()
    for (const model of this.#deps.engine.loadedModels()) {
      states.set(keyOf(model.modelID) ?? model.modelID.toLowerCase(), {
        kind: model.kind,
        memoryBytes: model.memoryBytes,
        contextLength: model.contextLength,
        slots: model.slots,
        busySlots: model.busySlots,
        queued: model.queued,
        loadedBy: model.loadedBy,
        idleSeconds: Math.floor(model.idleMs / 1000)
      })
    }
    return states
  }

  /** Keys of the models being loaded. */
  loadingKeys (): string[] {
    return [...this.#loading.keys()]
  }

  /** Whether the model is loaded or being loaded: disk eviction must leave it alone. */
  inUse (key: string): boolean {
    return this.#loading.has(key) || this.loadedStates().has(key)
  }

  /** Marks a model used now (a chat served by it), so disk eviction takes models unused for longest first. No SQLite write. */
  touch (modelID: string): void {
    const key = keyOf(modelID)
    if (key != null) this.#deps.records.markUsed(key)
  }
}

/** The key of an id of ours, or null for one that is not (and so names none of our rows). */
function keyOf (modelID: string): string | null {
  try {
    return modelKey(modelID)
  } catch (err) {
    if (err instanceof InvalidInputError) return null
    throw err
  }
}
