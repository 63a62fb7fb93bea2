// The model downloads of this node: which file of the hub an id means, how big it is, reserving its space
// (StorageBudget), then fetching it in the background with downloadFile (resumable, verified) and recording the
// outcome. Downloads survive a dropped connection (Range resume in download.ts) and a node restart (rows left
// `downloading` are resumed from their .part at start); a second call for the same model joins the running one.
import type { EventEmitter } from 'node:events'
import { mkdir, rm, stat } from 'node:fs/promises'
import { dirname, isAbsolute, join, relative, resolve } from 'node:path'
import type { Logger } from 'pino'
import { InvalidInputError, NotFoundError, UnavailableError } from '../errors.ts'
import type { CatalogEntry } from './catalog.ts'
import { downloadFile, type DownloadOptions, type DownloadProgress } from './download.ts'
import { DownloadNotFoundError, DownloadTooLargeError, HubUnreachableError, IntegrityError, ModelNotFoundError, SameFileError } from './errors.ts'
import type { ModelEventMap } from './events.ts'
import type { HubClient, HubFileMetadata } from './hub.ts'
import { modelKey, pickQuantFile, quantsIn, type ModelRef } from './model-id.ts'
import type { ModelProgress, ModelRecords, ModelRow } from './records.ts'
import type { StorageBudget } from './storage-budget.ts'

/** A model id the hub can serve: a catalog entry, a hub file or a hub repo's quantization. */
export type HubModelRef = Exclude<ModelRef, { kind: 'name' }>

export interface ModelDownloaderDeps {
  records: ModelRecords
  budget: StorageBudget
  hub: HubClient
  events: EventEmitter<ModelEventMap>
  log: Logger
}

export interface ModelDownloaderOptions {
  /** Where model files live: `<dir>/<org>/<repo>/<file>`. Required. */
  dir: string
  /** Retries and backoff of the downloader. Default: downloadFile's own (5 retries from 1 s, at most 60 s apart). */
  download?: DownloadOptions
}

/** A download in this process: joined by a second call, aborted by close(). */
interface Download {
  modelID: string
  key: string
  /** Settles when the download has been accepted (or refused): the answer of start. */
  accepted: Promise<void>
  /** Settles (never rejects) when the download has ended, whatever the outcome. */
  done: Promise<void>
  /** What downloadFile may write: what the budget and the disk allowed when the download started. */
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
  /** The hub commit to fetch (pinned by the first request); null: `main`, pinned by the download itself. */
  revision: string | null
}

export class ModelDownloader {
  readonly #deps: ModelDownloaderDeps
  readonly #dir: string
  readonly #downloadOptions: DownloadOptions
  readonly #downloads = new Map<string, Download>()
  readonly #shutdown = new AbortController()

  constructor (deps: ModelDownloaderDeps, options: ModelDownloaderOptions) {
    this.#deps = deps
    this.#dir = resolve(options.dir)
    this.#downloadOptions = options.download ?? {}
  }

  /**
   * Starts downloading a model and answers as soon as the download is accepted: `downloading` (also when it joins a
   * download already running), or `downloaded` when the file is already here. Refuses at once, before any byte:
   * ModelNotFoundError for a file the hub does not have, StorageBudgetError or InsufficientDiskError when it does
   * not fit, SameFileError when another id is the same file, HubUnreachableError when the hub cannot be connected to.
   */
  async start (ref: HubModelRef): Promise<{ status: 'downloading' | 'downloaded', modelID: string }> {
    const key = modelKey(ref.modelID)
    const running = this.#downloads.get(key)
    if (running != null) {
      await running.accepted
      return { status: 'downloading', modelID: running.modelID }
    }
    if (this.#shutdown.signal.aborted) throw new UnavailableError('The node is shutting down')
    const row = this.#deps.records.get(key)
    if (row?.status === 'downloaded') {
      if (await exists(this.#absolute(row.path))) return { status: 'downloaded', modelID: row.model_id }
      this.#deps.log.warn({ modelID: row.model_id, path: row.path }, 'downloaded model file is gone: downloading it again')
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
        this.#deps.budget.release(key)
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
    for (const row of this.#deps.records.all()) {
      if (row.status !== 'downloading' || this.#downloads.has(row.model_key)) continue
      const download = this.#track(row.model_id, row.model_key)
      const plan: Plan = { repo: row.repo, file: row.file, path: row.path, sizeBytes: row.size_bytes, sha256: row.sha256, revision: row.revision }
      download.accepted = this.#reserve(download, plan).then((evicted) => {
        this.#deps.log.info({ modelID: row.model_id, path: row.path }, 'resuming interrupted download')
        this.#deps.events.emit('download.started', { modelID: row.model_id, totalBytes: row.size_bytes })
        download.done = this.#deleteFiles(evicted).then(async () => { await this.#run(download, plan) })
      }, (err: unknown) => {
        // The budget was lowered (or the disk filled) while the node was stopped: this download no longer fits
        this.#downloads.delete(row.model_key)
        this.#deps.budget.release(row.model_key)
        this.#fail(row.model_key, row.model_id, err instanceof Error ? err.message : String(err))
      })
    }
  }

  /** How far the running download of a model is, or null when none runs. */
  progress (key: string): ModelProgress | null {
    return this.#downloads.get(key)?.progress ?? null
  }

  /** Stops every download (their .part files stay, and the next start resumes them) and waits for them. */
  async close (): Promise<void> {
    this.#shutdown.abort(new UnavailableError('The node is shutting down'))
    await Promise.all([...this.#downloads.values()].map(async (download) => {
      await download.accepted.catch(() => undefined) // a refusal was the caller's answer already
      await download.done
    }))
  }

  #track (modelID: string, key: string): Download {
    const download: Download = {
      modelID,
      key,
      accepted: Promise.resolve(),
      done: Promise.resolve(),
      maxBytes: null,
      progress: { receivedBytes: 0, totalBytes: null, fraction: null, bytesPerSecond: null, etaSeconds: null, message: null },
      signal: this.#shutdown.signal
    }
    this.#downloads.set(key, download)
    return download
  }

  /** Everything that can refuse a download, before its first byte: which file, how big, where, and whether it fits. */
  async #prepare (download: Download, ref: HubModelRef, row: ModelRow | null): Promise<Plan> {
    const { key, signal } = download
    // A quantization is looked up in the file list of one commit, and that commit's file is the one fetched
    const chosen = ref.kind === 'hf-quant'
      ? (row == null ? await this.#resolveQuant(ref, signal) : { file: row.file, commit: row.revision })
      : { file: ref.file, commit: null }
    const file = chosen.file
    const path = this.#relativePath(ref.repo, file)
    const catalog = ref.kind === 'catalog' ? ref.entry : null
    const metadata = await this.#metadata(ref, file, catalog, chosen.commit, signal)
    const plan: Plan = {
      repo: ref.repo, file, path, sizeBytes: metadata.sizeBytes, sha256: catalog?.sha256 ?? metadata.sha256, revision: metadata.commit ?? chosen.commit
    }
    const [disk, onDiskBytes] = await Promise.all([this.#deps.budget.disk(), this.#partBytes(path)])

    // From here on nothing awaits until the reservation is made, so two downloads cannot both take the same space
    const other = this.#deps.records.samePath(path, key)
    if (other != null && other.status !== 'failed') {
      throw new SameFileError(`${ref.modelID} is the same file as ${other.model_id} (${other.status}); use ${other.model_id}`)
    }
    const neededBytes = metadata.sizeBytes ?? catalog?.sizeBytes ?? 0
    const granted = this.#deps.budget.reserve(key, ref.modelID, neededBytes, disk, onDiskBytes)
    download.maxBytes = granted.maxBytes
    this.#deps.records.startDownloading({
      model_key: key, model_id: ref.modelID, repo: ref.repo, file, path, size_bytes: metadata.sizeBytes, sha256: plan.sha256, revision: plan.revision
    }, other)
    await this.#deleteFiles(granted.evicted)
    this.#deps.events.emit('download.started', { modelID: ref.modelID, totalBytes: metadata.sizeBytes })
    this.#deps.log.info({ modelID: ref.modelID, repo: ref.repo, file, sizeBytes: metadata.sizeBytes }, 'download started')
    return plan
  }

  /** The reservation of a resumed download; returns the models evicted for it, whose files the caller deletes. */
  async #reserve (download: Download, plan: Plan): Promise<ModelRow[]> {
    const [disk, onDiskBytes] = await Promise.all([this.#deps.budget.disk(), this.#partBytes(plan.path)])
    const granted = this.#deps.budget.reserve(download.key, download.modelID, plan.sizeBytes ?? 0, disk, onDiskBytes)
    download.maxBytes = granted.maxBytes
    return granted.evicted
  }

  async #resolveQuant (ref: { modelID: string, repo: string, quant: string | null }, signal: AbortSignal): Promise<{ file: string, commit: string | null }> {
    let files: string[]
    let commit: string | null
    try {
      ({ files, commit } = await this.#deps.hub.listFiles(ref.repo, signal))
    } catch (err) {
      if (!(err instanceof NotFoundError)) throw err
      throw new ModelNotFoundError(ref.modelID, `no repository ${ref.repo} on the hub`)
    }
    const file = pickQuantFile(files, ref.quant)
    if (file == null) {
      const offered = quantsIn(files)
      throw new ModelNotFoundError(ref.modelID, offered.length === 0 || ref.quant == null
        ? `${ref.repo} has no single-file GGUF model`
        : `${ref.repo} has no ${ref.quant} GGUF; it offers ${offered.join(', ')}`)
    }
    return { file, commit }
  }

  /**
   * Size and sha256 from the hub. A hub that answers badly now (a 5xx, a timeout) does not stop a catalog or file
   * download: the downloader retries, and the budget is then judged by the catalog's size or while streaming. A hub
   * that cannot be connected to at all (HubUnreachableError: offline, a wrong HF_ENDPOINT) refuses the download at
   * once, with the ways forward, instead of a retry loop that ends the same way.
   */
  async #metadata (ref: HubModelRef, file: string, catalog: CatalogEntry | null, revision: string | null, signal: AbortSignal): Promise<HubFileMetadata> {
    try {
      return await this.#deps.hub.fileMetadata(ref.repo, file, { revision: revision ?? undefined, signal })
    } catch (err) {
      if (signal.aborted) throw signal.reason
      if (err instanceof NotFoundError) {
        throw new ModelNotFoundError(ref.modelID, `${ref.repo} has no file ${file} on the hub`)
      }
      if (err instanceof UnavailableError && !(err instanceof HubUnreachableError)) {
        this.#deps.log.warn({ err, modelID: ref.modelID }, 'no metadata from the hub; downloading without it')
        return { sizeBytes: null, sha256: catalog?.sha256 ?? null, commit: null }
      }
      throw err
    }
  }

  async #run (download: Download, plan: Plan): Promise<void> {
    const { modelID, key } = download
    const destination = this.#absolute(plan.path)
    try {
      await mkdir(dirname(destination), { recursive: true })
      const result = await downloadFile({
        url: this.#deps.hub.fileUrl(plan.repo, plan.file, plan.revision ?? undefined),
        destination,
        expectedSha256: plan.sha256,
        expectedSize: plan.sizeBytes,
        token: this.#deps.hub.token,
        maxBytes: download.maxBytes,
        signal: download.signal,
        onProgress: (progress) => { this.#progress(download, progress) },
        onVerifying: () => { this.#deps.events.emit('download.verifying', { modelID }) },
        // A wait says why and for how long ("rate limited, resuming in 55 s"), until bytes flow again
        onWait: ({ reason, seconds }) => {
          const { receivedBytes, totalBytes } = download.progress
          this.#progress(download, { receivedBytes, totalBytes, bytesPerSecond: 0, etaSeconds: null }, `${reason}, resuming in ${seconds} s`)
        },
        onPinned: (commit) => { this.#deps.records.pinRevision(key, commit) }
      }, this.#downloadOptions)
      this.#deps.records.markDownloaded(key, result.sizeBytes, result.sha256)
      this.#deps.log.info({ modelID, sizeBytes: result.sizeBytes, sha256: result.sha256 }, 'download completed')
      this.#deps.events.emit('download.completed', { modelID, sizeBytes: result.sizeBytes, sha256: result.sha256 })
    } catch (err) {
      if (download.signal.aborted) {
        // Shutdown: the row stays `downloading` and the .part stays, so the next start resumes from it
        this.#deps.log.info({ modelID, receivedBytes: download.progress.receivedBytes }, 'download paused for shutdown')
        return
      }
      const message = err instanceof Error ? err.message : String(err)
      if (err instanceof IntegrityError || err instanceof DownloadTooLargeError || err instanceof DownloadNotFoundError) {
        // Nothing here is worth resuming (downloadFile removed it already in these cases; make sure)
        await rm(`${destination}.part`, { force: true })
      }
      this.#deps.log.warn({ err, modelID }, 'download failed')
      this.#fail(key, modelID, message)
    } finally {
      this.#downloads.delete(key)
      this.#deps.budget.release(key)
    }
  }

  #fail (key: string, modelID: string, error: string): void {
    this.#deps.records.markFailed(key, error)
    this.#deps.events.emit('download.failed', { modelID, error })
  }

  #progress (download: Download, progress: DownloadProgress, message: string | null = null): void {
    const { receivedBytes, totalBytes, bytesPerSecond, etaSeconds } = progress
    download.progress = {
      receivedBytes,
      totalBytes,
      message,
      fraction: totalBytes == null || totalBytes === 0 ? null : Math.min(1, receivedBytes / totalBytes),
      bytesPerSecond,
      etaSeconds
    }
    this.#deps.budget.written(download.key, receivedBytes)
    this.#deps.events.emit('download.progress', { modelID: download.modelID, ...download.progress })
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

  /** Bytes of the file already on disk in its .part, which a resumed download does not fetch again. */
  async #partBytes (path: string): Promise<number> {
    try {
      return (await stat(`${this.#absolute(path)}.part`)).size
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return 0 // a download from the first byte
      throw err
    }
  }

  /** Deletes evicted models' files. Their rows are gone already, so a file that cannot be deleted is only logged. */
  async #deleteFiles (rows: ModelRow[]): Promise<void> {
    for (const row of rows) {
      const path = this.#absolute(row.path)
      try {
        await rm(path, { force: true })
        await rm(`${path}.part`, { force: true })
      } catch (err) {
        this.#deps.log.error({ err, modelID: row.model_id, path }, 'could not delete an evicted model file')
      }
    }
  }
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
