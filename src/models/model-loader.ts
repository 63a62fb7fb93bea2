// Which model the engine holds: loading one (replacing the one loaded), unloading, what to show while a load runs,
// and "last used" for eviction, marked in memory on every chat and written in batches (ModelRecords.flushUsage).
import type { EventEmitter } from 'node:events'
import type { Logger } from 'pino'
import { InvalidInputError } from '../errors.ts'
import type { LoadedModelInfo, LoadOptions } from '../inference/index.ts'
import type { ModelEventMap } from './events.ts'
import { modelKey } from './model-id.ts'
import type { ModelRecords } from './records.ts'

/** The model the engine holds, for the /v1/app snapshot. */
export interface LoadedModel {
  modelID: string
  status: 'loaded' | 'loading'
  contextLength: number | null
  /** Where it runs (`cpu` or the GPU backend) and how many of its layers the GPU holds; null while loading. */
  gpu: { backend: string, gpuLayers: number, totalLayers: number } | null
}

/** The part of LocalEngine the store drives. */
export interface ModelEngine {
  load: (modelID: string, path: string, options?: LoadOptions) => Promise<LoadedModelInfo>
  unload: () => Promise<void>
  loaded: () => LoadedModelInfo | null
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
  #loading: { key: string, modelID: string } | null = null

  constructor (deps: ModelLoaderDeps) {
    this.#deps = deps
  }

  /** Loads a model into the engine, replacing the one loaded; remembers it as the one to reload at the next start. */
  async load (model: LoadableModel, options: LoadOptions = {}): Promise<{ modelID: string, status: 'loaded', contextLength: number }> {
    const { key, modelID, path } = model
    const before = this.#deps.engine.loaded()
    if (before?.modelID !== modelID || before.path !== path) this.#loading = { key, modelID }
    let info: LoadedModelInfo
    try {
      info = await this.#deps.engine.load(modelID, path, options)
    } finally {
      if (this.#loading?.key === key) this.#loading = null
    }
    this.#deps.records.markLoaded(key, info.trainContextLength)
    // The engine answers a load of the model it holds with the same info: nothing was loaded, nothing to announce
    if (info !== before) this.#deps.events.emit('model.loaded', { modelID, contextLength: info.contextLength })
    return { modelID, status: 'loaded', contextLength: info.contextLength }
  }

  /** Unloads the loaded model, if any, and forgets it as the one to reload at start. Returns its id, or null. */
  async unload (): Promise<{ modelID: string | null }> {
    const loaded = this.#deps.engine.loaded()
    await this.#deps.engine.unload()
    this.#deps.records.clearLastLoaded()
    if (loaded != null) this.#deps.events.emit('model.unloaded', { modelID: loaded.modelID })
    return { modelID: loaded?.modelID ?? null }
  }

  /** What the engine holds, or is loading, for the snapshot. */
  loadedModel (): LoadedModel | null {
    if (this.#loading != null) return { modelID: this.#loading.modelID, status: 'loading', contextLength: null, gpu: null }
    const info = this.#deps.engine.loaded()
    return info == null
      ? null
      : { modelID: info.modelID, status: 'loaded', contextLength: info.contextLength, gpu: { backend: info.backend, gpuLayers: info.gpuLayers, totalLayers: info.totalLayers } }
  }

  /** The key of the engine's model; the engine may hold one loaded under an id that is not ours (a test's path). */
  loadedKey (): string | null {
    const loaded = this.#deps.engine.loaded()
    return loaded == null ? null : keyOf(loaded.modelID) ?? loaded.modelID.toLowerCase() // matches none of our rows
  }

  /** Whether the model is loaded or being loaded: eviction must leave it alone. */
  inUse (key: string): boolean {
    return this.#loading?.key === key || this.loadedKey() === key
  }

  /** Marks a model used now (a chat served by it), so eviction takes models unused for longest first. No SQLite write. */
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
