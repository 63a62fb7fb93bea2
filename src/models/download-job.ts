// What one download carries from attempt to attempt, and the few steps every part of the download engine takes on it.
import { createHash } from 'node:crypto'
import { rm } from 'node:fs/promises'
import type { ProgressReporter } from './download-progress.ts'
import type { Part } from './part-file.ts'

export interface Job {
  url: string
  partPath: string
  token: string | null
  maxBytes: number | null
  expectedSha256: string | null
  expectedSize: number | null
  signal: AbortSignal | undefined
  idleTimeoutMs: number
  progress: ProgressReporter
  onVerifying: (() => void) | undefined
  onPinned: ((commit: string) => void) | undefined
  part: Part
  /** Requests made so far (redirect hops not counted), for the error that ends the download. */
  attempts: number
  /** Origins that have answered this download: one of them refusing a connection later is a hiccup worth a retry. */
  answered: Set<string>
}

/** A failure worth another try: the connection dropped, or the server said "later" (5xx, 429). */
export class RetryableError extends Error {
  readonly status: number | null
  readonly retryAfterMs: number | null
  constructor (message: string, details: { status?: number | null, retryAfterMs?: number | null, cause?: unknown }) {
    super(message, { cause: details.cause })
    this.status = details.status ?? null
    this.retryAfterMs = details.retryAfterMs ?? null
  }
}

/** Drops what the .part holds: the next attempt starts from the first byte. */
export async function restartPart (job: Job): Promise<void> {
  await rm(job.partPath, { force: true })
  job.part = { hash: createHash('sha256'), receivedBytes: 0 }
}

/** Deletes the .part: what it holds is not worth resuming. */
export async function discardPart (job: Job): Promise<void> {
  await rm(job.partPath, { force: true })
}

/** A file downloaded, verified and in place. */
export interface DownloadResult { path: string, sha256: string, sizeBytes: number }
