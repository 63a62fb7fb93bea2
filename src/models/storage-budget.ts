// Where model files may grow: the storage budget (`max_storage_gb`) and the disk itself. A download reserves its
// bytes before its first byte arrives; when they do not fit, least recently used models that are not in use are
// evicted (with `auto_manage_models` on), and otherwise the download is refused with the figures that decided it.
// The budget counts downloaded hub models only; the disk check counts what the file system says is free (statfs).
import type { EventEmitter } from 'node:events'
import { statfs } from 'node:fs/promises'
import { dirname } from 'node:path'
import type { Logger } from 'pino'
import type { Settings } from '../settings/index.ts'
import { InsufficientDiskError, StorageBudgetError } from './errors.ts'
import type { ModelEventMap } from './events.ts'
import type { ModelRecords, ModelRow } from './records.ts'

/** `max_storage_gb` counts decimal gigabytes, as disk makers and the hub's listings do. */
export const BYTES_PER_GB = 1_000_000_000
/**
 * Disk a download may not take: the database, its WAL and the logs need room to write, and a disk filled to the last
 * byte fails in ways far from the download that filled it.
 */
export const DEFAULT_DISK_HEADROOM_BYTES = 256 * 1024 * 1024

export interface StorageBudgetDeps {
  records: ModelRecords
  settings: { get: () => Pick<Settings, 'max_storage_gb' | 'auto_manage_models'> }
  /** Whether a model is loaded or loading: such a model is never evicted. */
  inUse: (key: string) => boolean
  events: EventEmitter<ModelEventMap>
  log: Logger
}

export interface StorageBudgetOptions {
  /** The models dir: the file system whose free space is checked. Required. */
  dir: string
  /** Disk left free whatever the downloads. Default 256 MiB. */
  diskHeadroomBytes?: number
}

/** Free space of the file system, as statfs reports it to an unprivileged process. */
export interface DiskSpace { freeBytes: number }

/** What a download holds while it runs. */
interface Reservation {
  /** The file's whole size, as counted against the budget. */
  bytes: number
  /** Bytes already on disk (a resumed .part and what arrived since): the disk has given those already. */
  onDiskBytes: number
}

export interface Granted {
  /** Models evicted to make room: their rows are gone already; the caller deletes their files. */
  evicted: ModelRow[]
  /** The most bytes the file may have: what the budget and the disk allow it. Null when neither limits it. */
  maxBytes: number | null
}

export class StorageBudget {
  readonly #deps: StorageBudgetDeps
  readonly #dir: string
  readonly #headroomBytes: number
  readonly #reservations = new Map<string, Reservation>()

  constructor (deps: StorageBudgetDeps, options: StorageBudgetOptions) {
    this.#deps = deps
    this.#dir = options.dir
    this.#headroomBytes = options.diskHeadroomBytes ?? DEFAULT_DISK_HEADROOM_BYTES
  }

  /** The disk's free space now; read before `reserve`, which must not await (see there). */
  async disk (): Promise<DiskSpace> {
    // The models dir appears with the first download; until then its nearest existing parent is on the same disk
    for (let dir = this.#dir; ; dir = dirname(dir)) {
      try {
        const stats = await statfs(dir)
        return { freeBytes: stats.bavail * stats.bsize }
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'ENOENT' || dirname(dir) === dir) throw err
      }
    }
  }

  /**
   * Holds `neededBytes` of the budget and of the disk for the download of `key`, evicting least-recently-used
   * downloaded models that are not in use when `auto_manage_models` is on. Synchronous, so no other download can
   * judge the space meanwhile. Throws StorageBudgetError (409) or InsufficientDiskError (507) when it cannot fit.
   * `onDiskBytes` are bytes of this file already written (a .part being resumed).
   */
  reserve (key: string, modelID: string, neededBytes: number, disk: DiskSpace, onDiskBytes = 0): Granted {
    const { max_storage_gb: maxGB, auto_manage_models: autoManage } = this.#deps.settings.get()
    const budgetBytes = Math.floor(maxGB * BYTES_PER_GB)
    const downloadedBytes = this.#deps.records.downloadedBytes()
    let reservedBytes = 0
    let othersStillToWrite = 0
    for (const [other, reservation] of this.#reservations) {
      if (other === key) continue
      reservedBytes += reservation.bytes
      othersStillToWrite += Math.max(0, reservation.bytes - reservation.onDiskBytes)
    }
    const freeBytes = budgetBytes - downloadedBytes - reservedBytes
    const diskFreeBytes = disk.freeBytes - othersStillToWrite - this.#headroomBytes
    const toWrite = Math.max(0, neededBytes - onDiskBytes)
    const fits = (freed: number): boolean => neededBytes <= freeBytes + freed && freeBytes + freed > 0 && toWrite <= diskFreeBytes + freed

    const evicted: ModelRow[] = []
    let freed = 0
    if (!fits(0)) {
      const candidates = autoManage
        ? this.#deps.records.evictable().filter((row) => row.model_key !== key && !this.#deps.inUse(row.model_key))
        : []
      for (const row of candidates) {
        if (fits(freed)) break
        evicted.push(row)
        freed += row.size_bytes ?? 0
      }
      if (neededBytes > freeBytes + freed || freeBytes + freed <= 0) {
        throw new StorageBudgetError(budgetMessage({ modelID, neededBytes, budgetBytes, maxGB, downloadedBytes, reservedBytes, freeBytes, autoManage, evictableBytes: freed }),
          neededBytes, freeBytes)
      }
      if (toWrite > diskFreeBytes + freed) {
        throw new InsufficientDiskError(diskMessage({ modelID, toWrite, diskFreeBytes: disk.freeBytes, othersStillToWrite, headroomBytes: this.#headroomBytes, autoManage, evictableBytes: freed, dir: this.#dir }))
      }
      this.#deps.records.remove(evicted.map((row) => row.model_key))
      for (const row of evicted) {
        this.#deps.log.info({ modelID: row.model_id, sizeBytes: row.size_bytes, forModelID: modelID }, 'evicted least recently used model')
        this.#deps.events.emit('model.evicted', { modelID: row.model_id, sizeBytes: row.size_bytes ?? 0 })
      }
    }
    this.#reservations.set(key, { bytes: neededBytes, onDiskBytes })
    const byBudget = freeBytes + freed
    const byDisk = onDiskBytes + diskFreeBytes + freed
    return { evicted, maxBytes: Math.min(byBudget, byDisk) }
  }

  /** How much of the reserved file is on disk now, so the other downloads' disk check counts only what is still to come. */
  written (key: string, onDiskBytes: number): void {
    const reservation = this.#reservations.get(key)
    if (reservation != null) reservation.onDiskBytes = onDiskBytes
  }

  /** The download ended (done, failed or paused): its bytes are counted as downloaded, or not at all. */
  release (key: string): void {
    this.#reservations.delete(key)
  }
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

function diskMessage (facts: {
  modelID: string, toWrite: number, diskFreeBytes: number, othersStillToWrite: number, headroomBytes: number,
  autoManage: boolean, evictableBytes: number, dir: string
}): string {
  const { modelID, toWrite, diskFreeBytes, othersStillToWrite, headroomBytes, autoManage, evictableBytes, dir } = facts
  const parts = [
    `Not enough disk space: ${modelID} needs ${formatBytes(toWrite)} more`,
    `the disk of ${dir} has ${formatBytes(diskFreeBytes)} free`
  ]
  if (othersStillToWrite > 0) parts.push(`downloads in progress will still write ${formatBytes(othersStillToWrite)}`)
  parts.push(`and ${formatBytes(headroomBytes)} stay free for the database`)
  const advice = autoManage && evictableBytes > 0
    ? `; evicting every unloaded model would free only ${formatBytes(evictableBytes)}. Free some disk space`
    : '. Free some disk space, or delete models you no longer use'
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
