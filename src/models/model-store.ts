// The models a node knows: the catalog, what it has downloaded or is downloading, and which one the engine has
// loaded. Downloads run in the background (spec §4.3 answers `downloading` at once) and survive a dropped connection
// (Range resume in download.ts) and a node restart (rows left `downloading` are resumed from their .part at start).
// The storage budget (`max_storage_gb`) is judged before a download starts, with the sizes the hub announces, and
// enforced during it through downloadFile's maxBytes.
import { EventEmitter } from 'node:events'
import { mkdir, rm, stat } from 'node:fs/promises'
import { dirname, isAbsolute, join, relative, resolve } from 'node:path'
import type { Logger } from 'pino'
import { InvalidInputError, NotFoundError, UnavailableError } from '../errors.ts'
import type { LoadedModelInfo } from '../inference/index.ts'
import type { Settings } from '../settings/index.ts'
import { inTransaction, type Database } from '../store/index.ts'
import { CATALOG, type CatalogEntry } from './catalog.ts'
import { downloadFile, type DownloadOptions, type DownloadProgress } from './download.ts'
import { DownloadNotFoundError, DownloadTooLargeError, IntegrityError, ModelNotDownloadedError, ModelNotFoundError, SameFileError, StorageBudgetError } from './errors.ts'
import { HubClient, type HubFileMetadata } from './hub.ts'
import { describeHubFile, modelKey, parseModelID, pickQuantFile, quantsIn, type ModelRef } from './model-id.ts'

/** `max_storage_gb` counts decimal gigabytes, as disk makers and the hub's listings do. */
export const BYTES_PER_GB = 1_000_000_000

export type ModelStatus = 'available' | 'downloading' | 'downloaded' | 'loaded' | 'failed'

/** CONTRACT §3: a model as listings show it (GET /v1/app/models and the /v1/app snapshot). */
export interface ModelRecord {
  modelID: string
  name: string
  family: string | null
  parameters: string | null
  quantization: string | null
  /** Exact once the hub announced it or the file is on disk; the catalog's approximate size before that. */
  sizeBytes: number | null
  contextLength: number | null
  status: ModelStatus
  progress: ModelProgress | null
  error: string | null
  /** Where the file comes from: `hf.co/<org>/<repo>/<file>`. */
  source: string
}

export interface ModelProgress {
  receivedBytes: number
  totalBytes: number | null
  fraction: number | null
  bytesPerSecond: number | null
  etaSeconds: number | null
}

/** The model the engine holds, for the /v1/app snapshot. */
export interface LoadedModel {
  modelID: string
  status: 'loaded' | 'loading'
  contextLength: number | null
}

/** The events of `ModelStore.events`, each carrying the model's id. */
export interface ModelEventMap {
  'download.started': [{ modelID: string, totalBytes: number | null }]
  'download.progress': [{ modelID: string } & ModelProgress]
  'download.verifying': [{ modelID: string }]
  'download.completed': [{ modelID: string, sizeBytes: number, sha256: string }]
  'download.failed': [{ modelID: string, error: string }]
  'model.loaded': [{ modelID: string, contextLength: number }]
  'model.load_failed': [{ modelID: string, error: string }]
  'model.unloaded': [{ modelID: string }]
  'model.evicted': [{ modelID: string, sizeBytes: number }]
}
export type ModelEventType = keyof ModelEventMap
export const MODEL_EVENT_TYPES: readonly ModelEventType[] = [
  'download.started', 'download.progress', 'download.verifying', 'download.completed', 'download.failed',
  'model.loaded', 'model.load_failed', 'model.unloaded', 'model.evicted'
]

/** The part of LocalEngine the store drives. */
export interface ModelEngine {
  load: (modelID: string, path: string) => Promise<LoadedModelInfo>
  unload: () => Promise<void>
  loaded: () => LoadedModelInfo | null
}

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
}

interface ModelRow {
  model_key: string
  model_id: string
  repo: string
  file: string
  path: string
  status: 'downloading' | 'downloaded' | 'failed'
  size_bytes: number | null
  sha256: string | null
  error: string | null
  context_length: number | null
  created_at: string
  downloaded_at: string | null
  last_used_at: string | null
}

/** A download in this process: joined by a second call, aborted by close(). */
interface Download {
  modelID: string
  key: string
  /** Settles when the download has been accepted (or refused): the answer of startDownload. */
  accepted: Promise<void>
  /** Settles (never rejects) when the download has ended, whatever the outcome. */
  done: Promise<void>
  /** Bytes this download holds in the budget while it runs. */
  reservedBytes: number
  /** What downloadFile may write: the free budget when the download started. */
  maxBytes: number | null
  progress: ModelProgress
  /** Aborted by close(): the download pauses, to be resumed at the next start. */
  signal: AbortSignal
}

interface Plan {
  repo: string
  file: string
  path: string
  sizeBytes: number | null
  sha256: string | null
}

export class ModelStore {
  /** Download, load and eviction events; listeners must not throw. */
  readonly events = new EventEmitter<ModelEventMap>()
  readonly #db: Database
  readonly #engine: ModelEngine
  readonly #settings: ModelStoreDeps['settings']
  readonly #log: Logger
  readonly #dir: string
  readonly #hub: HubClient
  readonly #downloadOptions: DownloadOptions
  readonly #downloads = new Map<string, Download>()
  readonly #shutdown = new AbortController()
  #loading: string | null = null
  #reloading: Promise<void> | null = null
  readonly #statements

  constructor (deps: ModelStoreDeps, options: ModelStoreOptions) {
    this.#db = deps.db
    this.#engine = deps.engine
    this.#settings = deps.settings
    this.#log = deps.log
    this.#dir = resolve(options.dir)
    this.#hub = new HubClient({ url: options.hubUrl, token: options.token })
    this.#downloadOptions = options.download ?? {}
    this.events.setMaxListeners(0) // one per open event stream; a leak would show as streams, not listeners
    const db = this.#db
    this.#statements = {
      all: db.prepare('SELECT * FROM models ORDER BY created_at, model_key'),
      get: db.prepare('SELECT * FROM models WHERE model_key = ?'),
      byPath: db.prepare('SELECT * FROM models WHERE path = ? AND model_key != ?'),
      downloadedBytes: db.prepare("SELECT COALESCE(SUM(size_bytes), 0) AS total FROM models WHERE status = 'downloaded'"),
      evictable: db.prepare(`SELECT * FROM models WHERE status = 'downloaded'
        ORDER BY COALESCE(last_used_at, downloaded_at, created_at), model_key`),
      upsertDownloading: db.prepare(`INSERT INTO models (model_key, model_id, repo, file, path, status, size_bytes, sha256, error, created_at)
        VALUES (?, ?, ?, ?, ?, 'downloading', ?, ?, NULL, ?)
        ON CONFLICT (model_key) DO UPDATE SET repo = excluded.repo, file = excluded.file, path = excluded.path,
          status = 'downloading', size_bytes = excluded.size_bytes, sha256 = excluded.sha256, error = NULL`),
      markDownloaded: db.prepare(`UPDATE models SET status = 'downloaded', size_bytes = ?, sha256 = ?, error = NULL, downloaded_at = ?
        WHERE model_key = ?`),
      markFailed: db.prepare("UPDATE models SET status = 'failed', error = ? WHERE model_key = ?"),
      markUsed: db.prepare('UPDATE models SET last_used_at = ? WHERE model_key = ?'),
      setContextLength: db.prepare('UPDATE models SET context_length = ? WHERE model_key = ?'),
      remove: db.prepare('DELETE FROM models WHERE model_key = ?'),
      lastLoaded: db.prepare('SELECT model_key FROM loaded_model WHERE id = 1'),
      setLastLoaded: db.prepare('INSERT INTO loaded_model (id, model_key) VALUES (1, ?) ON CONFLICT (id) DO UPDATE SET model_key = excluded.model_key'),
      clearLastLoaded: db.prepare('DELETE FROM loaded_model')
    }
  }

  /** Every catalog entry (`available` until downloaded), then every other model this node has asked the hub for. */
  list (): ModelRecord[] {
    const rows = this.#statements.all.all() as unknown as ModelRow[]
    const byKey = new Map(rows.map((row) => [row.model_key, row]))
    const records = CATALOG.map((entry) => {
      const row = byKey.get(entry.id)
      byKey.delete(entry.id)
      return row == null ? availableRecord(entry) : this.#record(row, entry)
    })
    for (const row of byKey.values()) records.push(this.#record(row, null))
    return records
  }

  /** The record of one model, or ModelNotFoundError. */
  get (modelID: string): ModelRecord {
    const ref = this.#known(modelID)
    const row = this.#row(modelKey(ref.modelID))
    if (row != null) return this.#record(row, ref.kind === 'catalog' ? ref.entry : null)
    if (ref.kind === 'catalog') return availableRecord(ref.entry)
    if (ref.kind === 'hf-file') return hubRecord(ref.modelID, ref.repo, ref.file)
    return { ...hubRecord(ref.modelID, ref.repo, `${ref.quant}.gguf`), source: ref.modelID } // file not resolved yet
  }

  /**
   * Starts downloading a model and answers as soon as the download is accepted: `downloading` (also when it joins a
   * download already running), or `downloaded` when the file is already here. Refuses at once, before any byte:
   * InvalidInputError for a malformed id, ModelNotFoundError for an unknown one (or a file the hub does not have),
   * StorageBudgetError when the budget cannot hold it, SameFileError when another id is the same file.
   */
  async startDownload (rawID: string): Promise<{ status: 'downloading' | 'downloaded', modelID: string }> {
    const ref = this.#known(rawID)
    const key = modelKey(ref.modelID)
    const running = this.#downloads.get(key)
    if (running != null) {
      await running.accepted
      return { status: 'downloading', modelID: running.modelID }
    }
    if (this.#shutdown.signal.aborted) throw new UnavailableError('The node is shutting down')
    const row = this.#row(key)
    if (row?.status === 'downloaded') {
      if (await exists(this.#absolute(row.path))) return { status: 'downloaded', modelID: row.model_id }
      this.#log.warn({ modelID: row.model_id, path: row.path }, 'downloaded model file is gone: downloading it again')
      const started = this.#downloads.get(key) // by a call that came in while we looked
      if (started != null) {
        await started.accepted
        return { status: 'downloading', modelID: started.modelID }
      }
    }

    const download = this.#track(ref.modelID, key)
    download.accepted = this.#prepare(download, ref, row).then(
      (plan) => { download.done = this.#run(download, plan) },
      (err: unknown) => {
        this.#downloads.delete(key)
        throw err
      })
    await download.accepted
    return { status: 'downloading', modelID: ref.modelID }
  }

  /**
   * Continues the downloads that were running when the node stopped, from their .part files. Returns at once; the
   * downloads run in the background, as if just started.
   */
  resumeInterrupted (): void {
    const rows = (this.#statements.all.all() as unknown as ModelRow[]).filter((row) => row.status === 'downloading')
    for (const row of rows) {
      if (this.#downloads.has(row.model_key)) continue
      const download = this.#track(row.model_id, row.model_key)
      const plan: Plan = { repo: row.repo, file: row.file, path: row.path, sizeBytes: row.size_bytes, sha256: row.sha256 }
      let evicted: ModelRow[]
      try {
        evicted = this.#reserve(download, row.model_id, plan.sizeBytes ?? 0)
      } catch (err) {
        // The budget was lowered while the node was stopped: this download no longer fits
        this.#downloads.delete(row.model_key)
        this.#fail(row.model_key, row.model_id, (err as Error).message)
        continue
      }
      this.#log.info({ modelID: row.model_id, path: row.path }, 'resuming interrupted download')
      this.events.emit('download.started', { modelID: row.model_id, totalBytes: row.size_bytes })
      download.accepted = Promise.resolve()
      download.done = this.#deleteFiles(evicted).then(async () => { await this.#run(download, plan) })
    }
  }

  /**
   * Loads a downloaded model into the engine, replacing the one loaded. ModelNotFoundError for an unknown id,
   * ModelNotDownloadedError (409) when it is not downloaded yet; ModelLoadError (409) when the file will not load.
   */
  async load (rawID: string): Promise<LoadedModel & { status: 'loaded', contextLength: number }> {
    const ref = this.#known(rawID)
    const key = modelKey(ref.modelID)
    const row = this.#row(key)
    if (row == null) throw new ModelNotDownloadedError(ref.modelID, 'never downloaded')
    if (row.status === 'downloading') {
      const fraction = this.#downloads.get(key)?.progress.fraction
      throw new ModelNotDownloadedError(row.model_id, fraction == null ? 'still downloading' : `still downloading, ${Math.floor(fraction * 100)}%`)
    }
    if (row.status === 'failed') throw new ModelNotDownloadedError(row.model_id, `its download failed: ${row.error ?? 'unknown reason'}`)
    this.#loading = key
    let info: LoadedModelInfo
    try {
      info = await this.#engine.load(row.model_id, this.#absolute(row.path))
    } finally {
      if (this.#loading === key) this.#loading = null
    }
    inTransaction(this.#db, () => {
      this.#statements.setLastLoaded.run(key)
      this.#statements.markUsed.run(now(), key)
      this.#statements.setContextLength.run(info.trainContextLength, key)
    })
    this.events.emit('model.loaded', { modelID: row.model_id, contextLength: info.contextLength })
    return { modelID: row.model_id, status: 'loaded', contextLength: info.contextLength }
  }

  /** Unloads the loaded model, if any, and forgets it as the one to reload at start. Returns its id, or null. */
  async unload (): Promise<{ modelID: string | null }> {
    const loaded = this.#engine.loaded()
    await this.#engine.unload()
    this.#statements.clearLastLoaded.run()
    if (loaded != null) this.events.emit('model.unloaded', { modelID: loaded.modelID })
    return { modelID: loaded?.modelID ?? null }
  }

  /** What the engine holds, or is loading, for the snapshot. */
  loadedModel (): LoadedModel | null {
    const info = this.#engine.loaded()
    if (this.#loading != null) {
      const row = this.#row(this.#loading)
      if (row != null) return { modelID: row.model_id, status: 'loading', contextLength: null }
    }
    return info == null ? null : { modelID: info.modelID, status: 'loaded', contextLength: info.contextLength }
  }

  /** Marks a model used now (a chat served by it), so eviction takes models unused for longest first. */
  touch (modelID: string): void {
    let key: string
    try {
      key = modelKey(modelID)
    } catch (err) {
      if (err instanceof InvalidInputError) return // not an id of ours, so not a row of ours either
      throw err
    }
    this.#statements.markUsed.run(now(), key)
  }

  /**
   * Loads the model that was loaded when the node last stopped. Returns at once; the load runs in the background
   * (a large model takes a while, and the node answers meanwhile). A failure is logged and sent as `model.load_failed`.
   */
  reloadLast (): void {
    const last = this.#statements.lastLoaded.get() as { model_key: string } | undefined
    const row = last == null ? null : this.#row(last.model_key)
    if (row == null || row.status !== 'downloaded') return
    this.#log.info({ modelID: row.model_id }, 'reloading the model loaded before the last stop')
    this.#reloading = this.load(row.model_id).then(() => undefined, (err: unknown) => {
      const error = err instanceof Error ? err.message : String(err)
      this.#log.warn({ err, modelID: row.model_id }, 'could not reload the last loaded model')
      this.events.emit('model.load_failed', { modelID: row.model_id, error })
    })
  }

  /** Stops every download (their .part files stay, and the next start resumes them) and waits for them. */
  async close (): Promise<void> {
    this.#shutdown.abort(new UnavailableError('The node is shutting down'))
    await Promise.all([...this.#downloads.values()].map(async (download) => {
      await download.accepted.catch(() => undefined) // a refusal was the caller's answer already
      await download.done
    }))
    await this.#reloading
  }

  /** Parses an id and refuses names that are neither in the catalog nor on the hub (spec §7: 404 naming it). */
  #known (rawID: string): Exclude<ModelRef, { kind: 'name' }> {
    const ref = parseModelID(rawID)
    if (ref.kind === 'name') throw new ModelNotFoundError(ref.modelID, 'not in the catalog; name a file on Hugging Face as hf.co/<org>/<repo>/<file>.gguf')
    return ref
  }

  /** The key of the engine's model; the engine may hold one loaded under an id that is not ours (a test's path). */
  #loadedKey (): string | null {
    const loaded = this.#engine.loaded()
    if (loaded == null) return null
    try {
      return modelKey(loaded.modelID)
    } catch (err) {
      if (err instanceof InvalidInputError) return loaded.modelID.toLowerCase() // matches none of our rows
      throw err
    }
  }

  #row (key: string): ModelRow | null {
    return (this.#statements.get.get(key) as unknown as ModelRow | undefined) ?? null
  }

  #track (modelID: string, key: string): Download {
    const download: Download = {
      modelID,
      key,
      accepted: Promise.resolve(),
      done: Promise.resolve(),
      reservedBytes: 0,
      maxBytes: null,
      progress: { receivedBytes: 0, totalBytes: null, fraction: null, bytesPerSecond: null, etaSeconds: null },
      signal: this.#shutdown.signal
    }
    this.#downloads.set(key, download)
    return download
  }

  /** Everything that can refuse a download, before its first byte: which file, how big, where, and whether it fits. */
  async #prepare (download: Download, ref: Exclude<ModelRef, { kind: 'name' }>, row: ModelRow | null): Promise<Plan> {
    const { key, signal } = download
    let file: string
    if (ref.kind === 'hf-quant') {
      file = row?.file ?? await this.#resolveQuant(ref, signal)
    } else {
      file = ref.file
    }
    const path = this.#relativePath(ref.repo, file)
    const catalog = ref.kind === 'catalog' ? ref.entry : null
    const metadata = await this.#metadata(ref, file, catalog, signal)

    // From here on nothing awaits until the reservation is made, so two downloads cannot both take the same space
    const other = this.#statements.byPath.get(path, key) as unknown as ModelRow | undefined
    if (other != null && other.status !== 'failed') {
      throw new SameFileError(`${ref.modelID} is the same file as ${other.model_id} (${other.status}); use ${other.model_id}`)
    }
    const neededBytes = metadata.sizeBytes ?? catalog?.sizeBytes ?? 0
    const evicted = this.#reserve(download, ref.modelID, neededBytes)
    inTransaction(this.#db, () => {
      if (other != null) this.#statements.remove.run(other.model_key) // a failed attempt under another id
      this.#statements.upsertDownloading.run(key, ref.modelID, ref.repo, file, path, metadata.sizeBytes, catalog?.sha256 ?? metadata.sha256, now())
    })
    await this.#deleteFiles(evicted)
    this.events.emit('download.started', { modelID: ref.modelID, totalBytes: metadata.sizeBytes })
    this.#log.info({ modelID: ref.modelID, repo: ref.repo, file, sizeBytes: metadata.sizeBytes }, 'download started')
    return { repo: ref.repo, file, path, sizeBytes: metadata.sizeBytes, sha256: catalog?.sha256 ?? metadata.sha256 }
  }

  async #resolveQuant (ref: { modelID: string, repo: string, quant: string }, signal: AbortSignal): Promise<string> {
    let files: string[]
    try {
      files = await this.#hub.listFiles(ref.repo, signal)
    } catch (err) {
      if (!(err instanceof NotFoundError)) throw err
      throw new ModelNotFoundError(ref.modelID, `no repository ${ref.repo} on the hub`)
    }
    const file = pickQuantFile(files, ref.quant)
    if (file == null) {
      const offered = quantsIn(files)
      throw new ModelNotFoundError(ref.modelID, offered.length === 0
        ? `${ref.repo} has no single-file GGUF`
        : `${ref.repo} has no ${ref.quant} GGUF; it offers ${offered.join(', ')}`)
    }
    return file
  }

  /** Size and sha256 from the hub. A hub we cannot reach now does not stop a catalog or file download: the
   * downloader retries, and the budget is then judged by the catalog's size or while streaming. */
  async #metadata (ref: Exclude<ModelRef, { kind: 'name' }>, file: string, catalog: CatalogEntry | null, signal: AbortSignal): Promise<HubFileMetadata> {
    try {
      return await this.#hub.fileMetadata(ref.repo, file, signal)
    } catch (err) {
      if (signal.aborted) throw signal.reason
      if (err instanceof NotFoundError) {
        throw new ModelNotFoundError(ref.modelID, `${ref.repo} has no file ${file} on the hub`)
      }
      if (err instanceof UnavailableError) {
        this.#log.warn({ err, modelID: ref.modelID }, 'no metadata from the hub; downloading without it')
        return { sizeBytes: null, sha256: catalog?.sha256 ?? null }
      }
      throw err
    }
  }

  /**
   * Holds `neededBytes` of the budget for this download, evicting least-recently-used downloaded models that are not
   * loaded when `auto_manage_models` is on. Synchronous, so no other download can judge the budget meanwhile.
   * Returns the evicted rows (already gone from the database) whose files the caller deletes.
   */
  #reserve (download: Download, modelID: string, neededBytes: number): ModelRow[] {
    const { max_storage_gb: maxGB, auto_manage_models: autoManage } = this.#settings.get()
    const budgetBytes = Math.floor(maxGB * BYTES_PER_GB)
    const downloadedBytes = (this.#statements.downloadedBytes.get() as { total: number }).total
    let reservedBytes = 0
    for (const other of this.#downloads.values()) if (other !== download) reservedBytes += other.reservedBytes
    const freeBytes = budgetBytes - downloadedBytes - reservedBytes
    const evicted: ModelRow[] = []
    if (neededBytes > freeBytes || freeBytes <= 0) {
      const loadedKey = this.#loadedKey()
      const candidates = autoManage
        ? (this.#statements.evictable.all() as unknown as ModelRow[]).filter((row) =>
            row.model_key !== download.key && row.model_key !== this.#loading && row.model_key !== loadedKey)
        : []
      let freed = 0
      for (const row of candidates) {
        if (neededBytes <= freeBytes + freed && freeBytes + freed > 0) break
        evicted.push(row)
        freed += row.size_bytes ?? 0
      }
      if (neededBytes > freeBytes + freed || freeBytes + freed <= 0) {
        throw new StorageBudgetError(budgetMessage({ modelID, neededBytes, budgetBytes, maxGB, downloadedBytes, reservedBytes, freeBytes, autoManage, evictableBytes: freed }),
          neededBytes, freeBytes)
      }
      inTransaction(this.#db, () => {
        for (const row of evicted) this.#statements.remove.run(row.model_key)
      })
      for (const row of evicted) {
        this.#log.info({ modelID: row.model_id, sizeBytes: row.size_bytes, forModelID: modelID }, 'evicted least recently used model')
        this.events.emit('model.evicted', { modelID: row.model_id, sizeBytes: row.size_bytes ?? 0 })
      }
      download.reservedBytes = neededBytes
      download.maxBytes = freeBytes + freed
      return evicted
    }
    download.reservedBytes = neededBytes
    download.maxBytes = freeBytes
    return evicted
  }

  async #run (download: Download, plan: Plan): Promise<void> {
    const { modelID, key } = download
    const destination = this.#absolute(plan.path)
    try {
      await mkdir(dirname(destination), { recursive: true })
      const result = await downloadFile({
        url: this.#hub.fileUrl(plan.repo, plan.file),
        destination,
        expectedSha256: plan.sha256,
        expectedSize: plan.sizeBytes,
        token: this.#hub.token,
        maxBytes: download.maxBytes,
        signal: download.signal,
        onProgress: (progress) => { this.#progress(download, progress) },
        onVerifying: () => { this.events.emit('download.verifying', { modelID }) }
      }, this.#downloadOptions)
      this.#statements.markDownloaded.run(result.sizeBytes, result.sha256, now(), key)
      this.#log.info({ modelID, sizeBytes: result.sizeBytes, sha256: result.sha256 }, 'download completed')
      this.events.emit('download.completed', { modelID, sizeBytes: result.sizeBytes, sha256: result.sha256 })
    } catch (err) {
      if (download.signal.aborted) {
        // Shutdown: the row stays `downloading` and the .part stays, so the next start resumes from it
        this.#log.info({ modelID, receivedBytes: download.progress.receivedBytes }, 'download paused for shutdown')
        return
      }
      const message = err instanceof Error ? err.message : String(err)
      if (err instanceof IntegrityError || err instanceof DownloadTooLargeError || err instanceof DownloadNotFoundError) {
        // Nothing here is worth resuming (downloadFile removed it already in these cases; make sure)
        await rm(`${destination}.part`, { force: true })
      }
      this.#log.warn({ err, modelID }, 'download failed')
      this.#fail(key, modelID, message)
    } finally {
      this.#downloads.delete(key)
    }
  }

  #fail (key: string, modelID: string, error: string): void {
    this.#statements.markFailed.run(error, key)
    this.events.emit('download.failed', { modelID, error })
  }

  #progress (download: Download, progress: DownloadProgress): void {
    const { receivedBytes, totalBytes, bytesPerSecond, etaSeconds } = progress
    download.progress = {
      receivedBytes,
      totalBytes,
      fraction: totalBytes == null || totalBytes === 0 ? null : Math.min(1, receivedBytes / totalBytes),
      bytesPerSecond,
      etaSeconds
    }
    this.events.emit('download.progress', { modelID: download.modelID, ...download.progress })
  }

  #record (row: ModelRow, entry: CatalogEntry | null): ModelRecord {
    const base = entry == null ? hubRecord(row.model_id, row.repo, row.file) : availableRecord(entry)
    const isLoaded = row.status === 'downloaded' && this.#loadedKey() === row.model_key
    return {
      ...base,
      modelID: row.model_id,
      sizeBytes: row.size_bytes ?? base.sizeBytes,
      contextLength: base.contextLength ?? row.context_length,
      status: isLoaded ? 'loaded' : row.status,
      progress: row.status === 'downloading' ? { ...(this.#downloads.get(row.model_key)?.progress ?? emptyProgress(row.size_bytes)) } : null,
      error: row.status === 'failed' ? row.error : null,
      source: `hf.co/${row.repo}/${row.file}`
    }
  }

  /** `<org>/<repo>/<file>` below the models dir; the id's segments were checked, and this checks the result too. */
  #relativePath (repo: string, file: string): string {
    const absolute = resolve(this.#dir, ...repo.split('/'), ...file.split('/'))
    const path = relative(this.#dir, absolute)
    if (path === '' || path.startsWith('..') || isAbsolute(path)) {
      throw new InvalidInputError(`Model file ${repo}/${file} would be outside the models directory`, 'modelID')
    }
    return path
  }

  #absolute (path: string): string {
    return join(this.#dir, path)
  }

  /** Deletes evicted models' files. Their rows are gone already, so a file that cannot be deleted is only logged. */
  async #deleteFiles (rows: ModelRow[]): Promise<void> {
    for (const row of rows) {
      const path = this.#absolute(row.path)
      try {
        await rm(path, { force: true })
        await rm(`${path}.part`, { force: true })
      } catch (err) {
        this.#log.error({ err, modelID: row.model_id, path }, 'could not delete an evicted model file')
      }
    }
  }
}

function availableRecord (entry: CatalogEntry): ModelRecord {
  return {
    modelID: entry.id,
    name: entry.name,
    family: entry.family,
    parameters: entry.parameters,
    quantization: entry.quantization,
    sizeBytes: entry.sizeBytes,
    contextLength: entry.contextLength,
    status: 'available',
    progress: null,
    error: null,
    source: `hf.co/${entry.repo}/${entry.file}`
  }
}

/** A hub model outside the catalog, described by its names; `file` is `<QUANT>.gguf` while a quant is unresolved. */
function hubRecord (modelID: string, repo: string, file: string): ModelRecord {
  const described = describeHubFile(repo, file)
  return {
    modelID,
    name: described.name,
    family: described.family,
    parameters: described.parameters,
    quantization: described.quantization,
    sizeBytes: null,
    contextLength: null,
    status: 'available',
    progress: null,
    error: null,
    source: `hf.co/${repo}/${file}`
  }
}

function emptyProgress (totalBytes: number | null): ModelProgress {
  return { receivedBytes: 0, totalBytes, fraction: totalBytes == null ? null : 0, bytesPerSecond: null, etaSeconds: null }
}

function budgetMessage (facts: {
  modelID: string, neededBytes: number, budgetBytes: number, maxGB: number, downloadedBytes: number,
  reservedBytes: number, freeBytes: number, autoManage: boolean, evictableBytes: number
}): string {
  const { modelID, neededBytes, budgetBytes, maxGB, downloadedBytes, reservedBytes, freeBytes, autoManage, evictableBytes } = facts
  const parts = [
    `Storage budget exceeded: ${modelID} needs ${formatBytes(neededBytes)}`,
    `max_storage_gb ${maxGB} allows ${formatBytes(budgetBytes)}`,
    `downloaded models use ${formatBytes(downloadedBytes)}`
  ]
  if (reservedBytes > 0) parts.push(`downloads in progress hold ${formatBytes(reservedBytes)}`)
  parts.push(`${formatBytes(Math.max(0, freeBytes))} free`)
  const advice = autoManage
    ? `; evicting every unloaded model would free only ${formatBytes(evictableBytes)}. Raise max_storage_gb or unload the loaded model`
    : '. Raise max_storage_gb, or turn on auto_manage_models to evict the least recently used models'
  return parts.join(', ') + advice
}

/** `1.5 GB (1500000000 bytes)`: decimal units, as max_storage_gb counts them, and the exact count. */
export function formatBytes (bytes: number): string {
  const units = ['bytes', 'kB', 'MB', 'GB', 'TB']
  let value = bytes
  let unit = 0
  while (Math.abs(value) >= 1000 && unit < units.length - 1) {
    value /= 1000
    unit++
  }
  return unit === 0 ? `${bytes} bytes` : `${value.toFixed(1)} ${units[unit]} (${bytes} bytes)`
}

async function exists (path: string): Promise<boolean> {
  try {
    await stat(path)
    return true
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return false // the answer, not a failure
    throw err
  }
}

function now (): string {
  return new Date().toISOString()
}
