// The models a node knows, as one service: the catalog and the records of what it has (records.ts), downloads in
// the background (downloader.ts), the storage budget and free disk they must fit in (storage-budget.ts), which
// model the engine holds (model-loader.ts), and GGUF files imported in place (imported-file.ts). This file only
// composes them and checks ids before handing them on.
import { EventEmitter } from 'node:events'
import { join, resolve } from 'node:path'
import type { Logger } from 'pino'
import type { Settings } from '../settings/index.ts'
import type { Database } from '../store/index.ts'
import { CATALOG } from './catalog.ts'
import type { DownloadOptions } from './download.ts'
import { ModelDownloader, type HubModelRef } from './downloader.ts'
import { ConflictError, InvalidInputError } from '../errors.ts'
import { ModelNotDownloadedError, ModelNotFoundError } from './errors.ts'
import type { ModelEventMap } from './events.ts'
import { HubClient } from './hub.ts'
import { importedModelID, inspectImportedFile } from './imported-file.ts'
import { modelKey, parseModelID } from './model-id.ts'
import { ModelLoader, type LoadedModel, type LoadReason, type ModelEngine } from './model-loader.ts'
import { ModelRecords, availableRecord, hubRecord, type ImportedRow, type LiveState, type ModelRecord } from './records.ts'
import { StorageBudget } from './storage-budget.ts'

export interface ModelStoreDeps {
  db: Database
  engine: ModelEngine
  settings: { get: () => Pick<Settings, 'max_storage_gb' | 'auto_manage_models'> }
  log: Logger
}

export interface ModelStoreOptions {
  /** Where model files live: `<dir>/<org>/<repo>/<file>`. Required; the node uses `<dataDir>/models`. */
  dir: string
  /** Base URL of the hub (`$HF_ENDPOINT`). Default https://huggingface.co */
  hubUrl?: string
  /** `$HF_TOKEN`. Default none. */
  token?: string | null
  /** Retries and backoff of the downloader. Default: downloadFile's own (5 retries from 1 s, at most 60 s apart). */
  download?: DownloadOptions
  /** Disk every download leaves free. Default 256 MiB (see StorageBudget). */
  diskHeadroomBytes?: number
}

export class ModelStore {
  /** Download, load and eviction events; listeners must not throw. */
  readonly events = new EventEmitter<ModelEventMap>()
  readonly #log: Logger
  readonly #dir: string
  readonly #records: ModelRecords
  readonly #loader: ModelLoader
  readonly #downloader: ModelDownloader
  #reloading: Promise<void> | null = null
  /** Aborted by close(): a background load waiting for its download gives up. */
  readonly #closing = new AbortController()

  constructor (deps: ModelStoreDeps, options: ModelStoreOptions) {
    this.#log = deps.log
    this.#dir = resolve(options.dir)
    this.events.setMaxListeners(0) // one per open event stream; a leak would show as streams, not listeners
    const { events } = this
    const log = deps.log
    const records = this.#records = new ModelRecords({ db: deps.db })
    const loader = this.#loader = new ModelLoader({ engine: deps.engine, records, events, log })
    const budget = new StorageBudget({ records, settings: deps.settings, inUse: (key) => loader.inUse(key), events, log },
      { dir: this.#dir, diskHeadroomBytes: options.diskHeadroomBytes })
    const hub = new HubClient({ url: options.hubUrl, token: options.token })
    this.#downloader = new ModelDownloader({ records, budget, hub, events, log }, { dir: this.#dir, download: options.download })
  }

  /** Every catalog entry (`available` until downloaded), then every other model this node has asked the hub for. */
  list (): ModelRecord[] {
    const live = this.#live()
    const byKey = new Map(this.#records.all().map((row) => [row.model_key, row]))
    const records = CATALOG.map((entry) => {
      const row = byKey.get(entry.id)
      byKey.delete(entry.id)
      return row == null ? availableRecord(entry) : this.#records.record(row, entry, live)
    })
    for (const row of byKey.values()) records.push(this.#records.record(row, null, live))
    for (const row of this.#records.allImported()) records.push(this.#records.importedRecord(row, live))
    return records
  }

  /** The record of one model, or ModelNotFoundError. */
  get (modelID: string): ModelRecord {
    const found = this.#find(modelID)
    if (found.kind === 'imported') return this.#records.importedRecord(found.row, this.#live())
    const { ref } = found
    const row = this.#records.get(modelKey(ref.modelID))
    if (row != null) return this.#records.record(row, ref.kind === 'catalog' ? ref.entry : null, this.#live())
    if (ref.kind === 'catalog') return availableRecord(ref.entry)
    if (ref.kind === 'hf-file') return hubRecord(ref.modelID, ref.repo, ref.file)
    return { ...hubRecord(ref.modelID, ref.repo, `${ref.quant}.gguf`), source: ref.modelID } // file not resolved yet
  }

  /**
   * Starts downloading a model and answers as soon as the download is accepted (see ModelDownloader.start).
   * InvalidInputError for a malformed id, ModelNotFoundError for an unknown one.
   */
  async startDownload (rawID: string): Promise<{ status: 'downloading' | 'downloaded', modelID: string }> {
    const found = this.#find(rawID)
    if (found.kind === 'imported') return { status: 'downloaded', modelID: found.row.model_id } // it is here already
    return await this.#downloader.start(found.ref)
  }

  /**
   * Registers a GGUF file the user already has, where it lies: never copied, never evicted, not counted against
   * `max_storage_gb`, listed with `source: "file:<path>"`. `modelID` defaults to the file's name (importedModelID).
   * NotFoundError when no file is there; InvalidInputError for a relative path or a file that is not GGUF, or an id
   * that is not a plain name; ConflictError when the id is a catalog model's or another file's, or the file is
   * imported under another id. Importing the same file under the same id again answers its record.
   */
  async import (path: string, modelID?: string): Promise<ModelRecord> {
    const file = await inspectImportedFile(path)
    const id = modelID == null ? importedModelID(file.path) : this.#importableID(modelID)
    const key = modelKey(id)
    const taken = this.#records.getImported(key)
    if (taken != null && taken.path !== file.path) throw new ConflictError(`Model id ${taken.model_id} is already imported from ${taken.path}; choose another id`)
    const other = this.#records.importedAt(file.path)
    if (other != null && other.model_key !== key) throw new ConflictError(`${file.path} is already imported as ${other.model_id}`)
    this.#records.addImported({ model_key: key, model_id: taken?.model_id ?? id, path: file.path, size_bytes: file.sizeBytes })
    const row = this.#records.getImported(key)
    if (row == null) throw new Error(`imported model ${id} vanished`) // the insert above is synchronous
    this.#log.info({ modelID: row.model_id, path: row.path, sizeBytes: row.size_bytes }, 'model file imported')
    return this.#records.importedRecord(row, this.#live())
  }

  /** Continues, in the background, the downloads that were running when the node stopped. */
  resumeInterrupted (): void {
    this.#downloader.resumeInterrupted()
  }

  /**
   * Loads a downloaded model into the engine beside those loaded. ModelNotFoundError for an unknown id,
   * ModelNotDownloadedError (409) when it is not downloaded yet; ModelLoadError (409) when the file will not load,
   * ModelTooLargeError (409) when it cannot fit. `reason` `request` (a model loaded for a request that names it) may
   * be evicted and leaves after the keep-alive; `explicit`, the default, stays and is loaded again at the next start.
   */
  async load (rawID: string, options: { reason?: LoadReason } = {}): Promise<{ modelID: string, status: 'loaded', contextLength: number }> {
    const found = this.#find(rawID)
    if (found.kind === 'imported') return await this.#loader.load({ key: found.row.model_key, modelID: found.row.model_id, path: found.row.path }, options)
    const { ref } = found
    const key = modelKey(ref.modelID)
    const row = this.#records.get(key)
    if (row == null) throw new ModelNotDownloadedError(ref.modelID, 'never downloaded')
    if (row.status === 'downloading') {
      throw new ModelNotDownloadedError(row.model_id, { downloading: this.#downloader.progress(key)?.fraction ?? null })
    }
    if (row.status === 'failed') throw new ModelNotDownloadedError(row.model_id, `its download failed: ${row.error ?? 'unknown reason'}`)
    return await this.#loader.load({ key, modelID: row.model_id, path: join(this.#dir, row.path) }, options)
  }

  /**
   * Unloads the model `rawID` names (any spelling of its id), or every loaded model when none is named, once their
   * requests in flight have finished; they are no longer loaded at the next start. A known model that is not loaded
   * is a no-op; an id this node does not know is ModelNotFoundError. Returns the ids unloaded.
   */
  async unload (rawID?: string): Promise<string[]> {
    if (rawID == null) return await this.#loader.unload()
    const loadedID = this.#loader.loadedAs(rawID)
    if (loadedID != null) return await this.#loader.unload(loadedID)
    this.#find(rawID) // throws for an id that names no model here
    return []
  }

  /** Whether the model `rawID` names is loaded, and under which id. */
  loadedAs (rawID: string): string | null {
    return this.#loader.loadedAs(rawID)
  }

  /** What the engine holds, or is loading, for the snapshot. */
  loadedModel (): LoadedModel | null {
    return this.#loader.loadedModel()
  }

  /** Marks a model used now (a chat served by it), in memory: `flushUsage` writes it, never the chat itself. */
  touch (modelID: string): void {
    this.#loader.touch(modelID)
  }

  /** Writes the "last used" times gathered since the last flush, in one transaction. */
  flushUsage (): void {
    this.#records.flushUsage()
  }

  /**
   * Loads the models that were loaded explicitly when the node last stopped. Returns at once; the loads run in the
   * background (a large model takes a while, and the node answers meanwhile). A failure is logged and sent as
   * `model.load_failed`.
   */
  reloadLast (): void {
    for (const key of this.#records.loadedKeys()) {
      const row = this.#records.get(key) ?? this.#records.getImported(key)
      if (row == null || ('status' in row && row.status !== 'downloaded')) continue
      this.#log.info({ modelID: row.model_id }, 'reloading a model loaded before the last stop')
      this.loadInBackground(row.model_id)
    }
  }

  /**
   * Loads a model without waiting for it (the node answers meanwhile; /v1/app shows `loading`); a model still to be
   * downloaded is downloaded first. A failure is logged and sent as `model.load_failed`. `serve --model` uses it.
   */
  loadInBackground (modelID: string): void {
    const previous = this.#reloading ?? Promise.resolve()
    this.#reloading = previous.then(async () => {
      const started = await this.startDownload(modelID)
      if (started.status === 'downloading') await this.#downloaded(started.modelID)
      await this.load(started.modelID)
    }).catch((err: unknown) => {
      const error = err instanceof Error ? err.message : String(err)
      this.#log.warn({ err, modelID }, 'could not load the model')
      this.events.emit('model.load_failed', { modelID, error })
    })
  }

  /** Settles when the running download of `modelID` ends: resolves once it is downloaded, rejects when it failed. */
  async #downloaded (modelID: string): Promise<void> {
    const key = modelKey(modelID)
    const closing = this.#closing.signal
    await new Promise<void>((resolve, reject) => {
      const check = (): void => {
        const row = this.#records.get(key)
        if (row?.status === 'downloaded' || row?.status === 'failed' || this.#downloader.progress(key) == null || closing.aborted) {
          this.events.off('download.completed', check)
          this.events.off('download.failed', check)
          closing.removeEventListener('abort', check)
          if (row?.status === 'downloaded') resolve()
          else reject(new ModelNotDownloadedError(modelID, row?.status === 'failed' ? `its download failed: ${row.error ?? 'unknown reason'}` : 'its download stopped'))
        }
      }
      this.events.on('download.completed', check)
      this.events.on('download.failed', check)
      closing.addEventListener('abort', check)
      check()
    })
  }

  /** Stops every download (their .part files stay, and the next start resumes them), waits for them, and writes usage. */
  async close (): Promise<void> {
    this.#closing.abort()
    await this.#downloader.close()
    await this.#reloading
    this.#records.flushUsage()
  }

  /** Parses an id: a hub model, or an imported file; anything else is 404 naming it. */
  #find (rawID: string): { kind: 'hub', ref: HubModelRef } | { kind: 'imported', row: ImportedRow } {
    const ref = parseModelID(rawID)
    if (ref.kind !== 'name') return { kind: 'hub', ref }
    const row = this.#records.getImported(modelKey(ref.modelID))
    if (row == null) throw new ModelNotFoundError(ref.modelID, 'not in the catalog nor imported; name a file on Hugging Face as hf.co/<org>/<repo>/<file>.gguf, or import a file you have')
    return { kind: 'imported', row }
  }

  /** An id the user chose for an imported file: a plain name (not a hub reference) that no catalog model has. */
  #importableID (raw: string): string {
    const ref = parseModelID(raw)
    if (ref.kind === 'catalog') throw new ConflictError(`${ref.modelID} is a catalog model's id; choose another id for the imported file`)
    if (ref.kind !== 'name') throw new InvalidInputError(`modelID of an imported file must be a plain name like my-model-q4, not a hub reference (${raw})`, 'modelID')
    return raw.trim()
  }

  #live (): LiveState {
    return { loaded: this.#loader.loadedStates(), progress: (key) => this.#downloader.progress(key) }
  }
}
