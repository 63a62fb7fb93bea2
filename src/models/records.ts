// What the node remembers of its models, in SQLite: the rows of the models it has downloaded, is downloading or
// failed to download, the GGUF files the user imported where they lie, the model to reload at start, and when each
// was last used. It also shapes a row into the record listings show. It knows nothing of the hub, the
// engine or the disk budget.
import { basename } from 'node:path'
import { inTransaction, type Database } from '../store/index.ts'
import type { CatalogEntry } from './catalog.ts'
import { describeHubFile } from './model-id.ts'

export type ModelStatus = 'available' | 'downloading' | 'downloaded' | 'loaded' | 'failed'

/** A model as listings show it (GET /v1/app/models and the /v1/app snapshot). */
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
  /** Where the file comes from: `hf.co/<org>/<repo>/<file>`, or `file:<absolute path>` for an imported file. */
  source: string
  /** What it is doing while loaded (status `loaded`); null otherwise. */
  loaded: LoadedState | null
}

/** What a listing shows of a loaded model. */
export interface LoadedState {
  kind: 'chat' | 'embedding'
  memoryBytes: number
  contextLength: number
  slots: number
  busySlots: number
  queued: number
  loadedBy: 'explicit' | 'request'
  idleSeconds: number
}

export interface ModelProgress {
  receivedBytes: number
  totalBytes: number | null
  fraction: number | null
  bytesPerSecond: number | null
  etaSeconds: number | null
  /** Why no bytes flow now, e.g. `rate limited, resuming in 55 s`; null while they do. */
  message: string | null
}

/** A row of the `models` table: a hub file this node has asked for. `path` is relative to the models dir. */
export interface ModelRow {
  model_key: string
  model_id: string
  repo: string
  file: string
  path: string
  status: 'downloading' | 'downloaded' | 'failed'
  size_bytes: number | null
  sha256: string | null
  /** The hub commit the download is pinned to (X-Repo-Commit); null until the hub has named one. */
  revision: string | null
  error: string | null
  context_length: number | null
  created_at: string
  downloaded_at: string | null
  last_used_at: string | null
}

/** A row of the `imported_models` table: a GGUF file registered in place. `path` is absolute. */
export interface ImportedRow {
  model_key: string
  model_id: string
  path: string
  size_bytes: number
  context_length: number | null
  created_at: string
  last_used_at: string | null
}

/** What a record shows of the node's live state: which models are loaded, how far each download is. */
export interface LiveState {
  loaded: ReadonlyMap<string, LoadedState>
  progress: (key: string) => ModelProgress | null
}

export class ModelRecords {
  readonly #db: Database
  readonly #statements
  /** `last_used_at` by model key, written by `flushUsage`: a chat marks its model used without touching SQLite. */
  readonly #pendingUsage = new Map<string, string>()

  constructor (deps: { db: Database }) {
    const db = this.#db = deps.db
    this.#statements = {
      all: db.prepare('SELECT * FROM models ORDER BY created_at, model_key'),
      get: db.prepare('SELECT * FROM models WHERE model_key = ?'),
      byPath: db.prepare('SELECT * FROM models WHERE path = ? AND model_key != ?'),
      downloadedBytes: db.prepare("SELECT COALESCE(SUM(size_bytes), 0) AS total FROM models WHERE status = 'downloaded'"),
      evictable: db.prepare(`SELECT * FROM models WHERE status = 'downloaded'
        ORDER BY COALESCE(last_used_at, downloaded_at, created_at), model_key`),
      upsertDownloading: db.prepare(`INSERT INTO models (model_key, model_id, repo, file, path, status, size_bytes, sha256, revision, error, created_at)
        VALUES (?, ?, ?, ?, ?, 'downloading', ?, ?, ?, NULL, ?)
        ON CONFLICT (model_key) DO UPDATE SET repo = excluded.repo, file = excluded.file, path = excluded.path,
          status = 'downloading', size_bytes = excluded.size_bytes, sha256 = excluded.sha256, revision = excluded.revision, error = NULL`),
      pinRevision: db.prepare('UPDATE models SET revision = ? WHERE model_key = ?'),
      markDownloaded: db.prepare(`UPDATE models SET status = 'downloaded', size_bytes = ?, sha256 = ?, error = NULL, downloaded_at = ?
        WHERE model_key = ?`),
      markFailed: db.prepare("UPDATE models SET status = 'failed', error = ? WHERE model_key = ?"),
      markUsed: db.prepare('UPDATE models SET last_used_at = ? WHERE model_key = ?'),
      setContextLength: db.prepare('UPDATE models SET context_length = ? WHERE model_key = ?'),
      remove: db.prepare('DELETE FROM models WHERE model_key = ?'),
      allImported: db.prepare('SELECT * FROM imported_models ORDER BY created_at, model_key'),
      getImported: db.prepare('SELECT * FROM imported_models WHERE model_key = ?'),
      importedByPath: db.prepare('SELECT * FROM imported_models WHERE path = ?'),
      insertImported: db.prepare(`INSERT INTO imported_models (model_key, model_id, path, size_bytes, created_at) VALUES (?, ?, ?, ?, ?)
        ON CONFLICT (model_key) DO UPDATE SET size_bytes = excluded.size_bytes WHERE path = excluded.path`),
      markImportedUsed: db.prepare('UPDATE imported_models SET last_used_at = ? WHERE model_key = ?'),
      setImportedContextLength: db.prepare('UPDATE imported_models SET context_length = ? WHERE model_key = ?'),
      forgetLoaded: db.prepare('DELETE FROM loaded_models WHERE model_key = ?'),
      loaded: db.prepare('SELECT model_key FROM loaded_models ORDER BY loaded_at, model_key'),
      setLoaded: db.prepare('INSERT INTO loaded_models (model_key, loaded_at) VALUES (?, ?) ON CONFLICT (model_key) DO NOTHING'),
      clearLoaded: db.prepare('DELETE FROM loaded_models')
    }
  }

  all (): ModelRow[] {
    return this.#statements.all.all() as unknown as ModelRow[]
  }

  get (key: string): ModelRow | null {
    return (this.#statements.get.get(key) as unknown as ModelRow | undefined) ?? null
  }

  /** Another model's row for the same file, if any. */
  samePath (path: string, key: string): ModelRow | null {
    return (this.#statements.byPath.get(path, key) as unknown as ModelRow | undefined) ?? null
  }

  /** Bytes the downloaded models hold on disk, as the storage budget counts them. */
  downloadedBytes (): number {
    return (this.#statements.downloadedBytes.get() as { total: number }).total
  }

  /** Downloaded models, least recently used first: the order eviction takes them in. */
  evictable (): ModelRow[] {
    this.flushUsage() // the order must see the chats served since the last flush
    return this.#statements.evictable.all() as unknown as ModelRow[]
  }

  /** Records a download as started, replacing the row of a failed attempt at the same file under another id. */
  startDownloading (row: Pick<ModelRow, 'model_key' | 'model_id' | 'repo' | 'file' | 'path' | 'size_bytes' | 'sha256' | 'revision'>, replacing: ModelRow | null): void {
    inTransaction(this.#db, () => {
      if (replacing != null) {
        this.#statements.remove.run(replacing.model_key)
        this.#statements.forgetLoaded.run(replacing.model_key)
      }
      this.#statements.upsertDownloading.run(row.model_key, row.model_id, row.repo, row.file, row.path, row.size_bytes, row.sha256, row.revision, now())
    })
  }

  /** The commit a running download was pinned to by the hub, so a resume after a restart asks for the same one. */
  pinRevision (key: string, commit: string): void {
    this.#statements.pinRevision.run(commit, key)
  }

  markDownloaded (key: string, sizeBytes: number, sha256: string): void {
    this.#statements.markDownloaded.run(sizeBytes, sha256, now(), key)
  }

  markFailed (key: string, error: string): void {
    this.#statements.markFailed.run(error, key)
  }

  /** Deletes rows in one transaction (evicted models); their files are the caller's to delete. */
  remove (keys: readonly string[]): void {
    inTransaction(this.#db, () => {
      for (const key of keys) {
        this.#statements.remove.run(key)
        this.#statements.forgetLoaded.run(key)
        this.#pendingUsage.delete(key)
      }
    })
  }

  /**
   * A model was loaded: used now, with the context its file declares; one loaded explicitly (`reload`) is loaded
   * again at the next start.
   */
  markLoaded (key: string, trainContextLength: number, reload: boolean): void {
    inTransaction(this.#db, () => {
      const at = now()
      if (reload) this.#statements.setLoaded.run(key, at)
      this.#statements.markUsed.run(at, key)
      this.#statements.markImportedUsed.run(at, key)
      this.#statements.setContextLength.run(trainContextLength, key)
      this.#statements.setImportedContextLength.run(trainContextLength, key)
    })
    this.#pendingUsage.delete(key)
  }

  /** The models to load again at the next start, in the order they were loaded. */
  loadedKeys (): string[] {
    return (this.#statements.loaded.all() as Array<{ model_key: string }>).map((row) => row.model_key)
  }

  /** Forgets `key` as a model to load at start; every model when none is given. */
  forgetLoaded (key?: string): void {
    if (key == null) this.#statements.clearLoaded.run()
    else this.#statements.forgetLoaded.run(key)
  }

  /** Marks a model used now, in memory only: the chat path never writes SQLite (see `flushUsage`). */
  markUsed (key: string): void {
    this.#pendingUsage.set(key, now())
  }

  /** Writes the `last_used_at` times gathered since the last flush, in one transaction (like API keys' `lastUsed`). */
  flushUsage (): void {
    if (this.#pendingUsage.size === 0) return
    const batch = [...this.#pendingUsage]
    inTransaction(this.#db, () => {
      for (const [key, at] of batch) {
        this.#statements.markUsed.run(at, key) // one of the two tables has the key
        this.#statements.markImportedUsed.run(at, key)
      }
    })
    for (const [key, at] of batch) if (this.#pendingUsage.get(key) === at) this.#pendingUsage.delete(key)
  }

  allImported (): ImportedRow[] {
    return this.#statements.allImported.all() as unknown as ImportedRow[]
  }

  getImported (key: string): ImportedRow | null {
    return (this.#statements.getImported.get(key) as unknown as ImportedRow | undefined) ?? null
  }

  importedAt (path: string): ImportedRow | null {
    return (this.#statements.importedByPath.get(path) as unknown as ImportedRow | undefined) ?? null
  }

  /** Registers an imported file; the same id for the same path again only refreshes its size. */
  addImported (row: Pick<ImportedRow, 'model_key' | 'model_id' | 'path' | 'size_bytes'>): void {
    this.#statements.insertImported.run(row.model_key, row.model_id, row.path, row.size_bytes, now())
  }

  /** The listing's record of an imported file. */
  importedRecord (row: ImportedRow, live: LiveState): ModelRecord {
    const file = basename(row.path)
    const name = file.replace(/\.gguf$/i, '')
    const described = describeHubFile(`local/${name}`, file)
    return {
      modelID: row.model_id,
      name,
      family: described.family,
      parameters: described.parameters,
      quantization: described.quantization,
      sizeBytes: row.size_bytes,
      contextLength: row.context_length,
      status: live.loaded.has(row.model_key) ? 'loaded' : 'downloaded',
      progress: null,
      error: null,
      source: `file:${row.path}`,
      loaded: live.loaded.get(row.model_key) ?? null
    }
  }

  /** The listing's record of a row; `entry` is its catalog entry, if it has one. */
  record (row: ModelRow, entry: CatalogEntry | null, live: LiveState): ModelRecord {
    const base = entry == null ? hubRecord(row.model_id, row.repo, row.file) : availableRecord(entry)
    const loaded = row.status === 'downloaded' ? live.loaded.get(row.model_key) ?? null : null
    return {
      ...base,
      modelID: row.model_id,
      sizeBytes: row.size_bytes ?? base.sizeBytes,
      contextLength: base.contextLength ?? row.context_length,
      status: loaded != null ? 'loaded' : row.status,
      progress: row.status === 'downloading' ? { ...(live.progress(row.model_key) ?? emptyProgress(row.size_bytes)) } : null,
      error: row.status === 'failed' ? row.error : null,
      source: `hf.co/${row.repo}/${row.file}`,
      loaded
    }
  }
}

export function availableRecord (entry: CatalogEntry): ModelRecord {
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
    source: `hf.co/${entry.repo}/${entry.file}`,
    loaded: null
  }
}

/** A hub model outside the catalog, described by its names; `file` is `<QUANT>.gguf` while a quant is unresolved. */
export function hubRecord (modelID: string, repo: string, file: string): ModelRecord {
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
    source: `hf.co/${repo}/${file}`,
    loaded: null
  }
}

function emptyProgress (totalBytes: number | null): ModelProgress {
  return { receivedBytes: 0, totalBytes, fraction: totalBytes == null ? null : 0, bytesPerSecond: null, etaSeconds: null, message: null }
}

export function now (): string {
  return new Date().toISOString()
}
