// The download engine: one file from a URL to disk, resumable, verified, bounded. It knows HTTP only as a client
// and nothing of the database; the model store decides what to fetch, where it goes and what it may cost. This file
// holds the attempt loop (when to retry, wait, resume or start over); one attempt's request and answer are
// download-attempt.ts's, the checks of sha256 and size and the rename download-verify.ts's, the .part file
// part-file.ts's, progress and the idle alarm download-progress.ts's.
import { createHash } from 'node:crypto'
import { setTimeout as sleep } from 'node:timers/promises'
import { InvalidInputError } from '../errors.ts'
import { backoffDelayMs } from '../wire/index.ts'
import { DownloadFailedError } from './errors.ts'
import { attempt } from './download-attempt.ts'
import { RetryableError, restartPart, type DownloadResult, type Job } from './download-job.ts'
import { ProgressReporter, type DownloadProgress } from './download-progress.ts'
import { SHA256_HEX, checkDeclaredSize, finish } from './download-verify.ts'
import { readPart } from './part-file.ts'

export type { DownloadProgress } from './download-progress.ts'

export interface DownloadRequest {
  url: string
  destination: string
  /** Lowercase or uppercase hex. Without it, the hub's X-Linked-Etag is used when it is a sha256. */
  expectedSha256?: string | null
  expectedSize?: number | null
  /** Sent as a Bearer token to the URL's origin only, never to a redirect target elsewhere (the CDN). */
  token?: string | null
  maxBytes?: number | null
  onProgress?: (progress: DownloadProgress) => void
  /** Called once every byte is in the .part, before the sha256 and size are compared and the file renamed. */
  onVerifying?: () => void
  /** Called before each wait between attempts: why (`rate limited`, `HTTP 503`, `connection lost`) and for how long. */
  onWait?: (wait: { reason: string, seconds: number }) => void
  /**
   * Called when a `/resolve/<branch>/` URL is pinned to the commit the hub named (X-Repo-Commit): every later request
   * of this download, resumes included, asks for that commit, so a file changed on the branch meanwhile cannot mix in.
   */
  onPinned?: (commit: string) => void
  /** Aborting keeps `destination + '.part'`, so a later call resumes; the promise rejects with the reason. */
  signal?: AbortSignal
}

export type { DownloadResult } from './download-job.ts'

export interface DownloadOptions {
  /**
   * Retries after a dropped connection, a 5xx or a 429. A retry that received bytes resets the count. A server that
   * has not answered this download and refuses the connection (no DNS name, nothing listening, no route) is not retried:
   * that is a HubUnreachableError at once. Default 5.
   */
  retries?: number
  /** First backoff delay, doubled per failure, with jitter. Default 1000. */
  baseDelayMs?: number
  /** Cap on any wait but a rate limit's, Retry-After included, so a server cannot park us for an hour. Default 60000. */
  maxDelayMs?: number
  /** Cap on the wait a 429 asks for (`RateLimit: …;t=N` or Retry-After): the hub's windows are minutes long. Default 300000. */
  maxRateLimitWaitMs?: number
  /** A request that sends no headers or body bytes for this long is dropped and resumed, like a lost connection:
   * a stalled socket would otherwise hold the download forever. Default 60000. */
  idleTimeoutMs?: number
}

/** Downloads `request.url` to `request.destination` through `destination.part`, resuming a `.part` left before. */
export async function downloadFile (request: DownloadRequest, options: DownloadOptions = {}): Promise<DownloadResult> {
  const { retries = 5, baseDelayMs = 1000, maxDelayMs = 60_000, maxRateLimitWaitMs = 300_000, idleTimeoutMs = 60_000 } = options
  const { url, destination, signal } = request
  if (!URL.canParse(url)) throw new InvalidInputError(`Not a URL: ${url}`, 'url')
  const requested = request.expectedSha256?.toLowerCase() ?? null
  if (requested != null && !SHA256_HEX.test(requested)) {
    throw new InvalidInputError(`Not a sha256: ${request.expectedSha256}`, 'expectedSha256')
  }
  const job: Job = {
    url,
    partPath: `${destination}.part`,
    token: request.token == null || request.token === '' ? null : request.token,
    maxBytes: request.maxBytes ?? null,
    expectedSha256: requested,
    expectedSize: request.expectedSize ?? null,
    signal,
    idleTimeoutMs,
    progress: new ProgressReporter(request.onProgress),
    onVerifying: request.onVerifying,
    onPinned: request.onPinned,
    part: { hash: createHash('sha256'), receivedBytes: 0 },
    attempts: 0,
    answered: new Set()
  }
  await checkDeclaredSize(job, job.expectedSize)
  signal?.throwIfAborted()
  try {
    job.part = await readPart(job.partPath, signal)
  } catch (err) {
    if (signal?.aborted === true) throw signal.reason // the read stream rejects with its own AbortError
    throw err
  }
  if (job.part.receivedBytes > 0) {
    await checkDeclaredSize(job, job.expectedSize)
    if (job.expectedSize != null && job.part.receivedBytes > job.expectedSize) await restartPart(job)
  }

  let failures = 0
  let restarts = 0
  for (;;) {
    signal?.throwIfAborted()
    const receivedBefore = job.part.receivedBytes
    job.attempts++
    try {
      const outcome = await attempt(job)
      if (outcome === 'complete') break
      // The server holds a different file than our .part (416 beyond its end): start over, but only once
      if (++restarts > 1) {
        throw new DownloadFailedError(url, 'the server keeps refusing the range we ask', { attempts: job.attempts })
      }
      await restartPart(job)
    } catch (err) {
      if (signal?.aborted === true) throw signal.reason
      if (!(err instanceof RetryableError)) throw err
      failures = job.part.receivedBytes > receivedBefore ? 1 : failures + 1 // progress means the link works
      if (failures > retries) {
        throw new DownloadFailedError(url, `gave up after ${job.attempts} attempts: ${err.message}`,
          { status: err.status, attempts: job.attempts, cause: err.cause })
      }
      const backoffMs = backoffDelayMs(failures, { minMs: baseDelayMs, maxMs: maxDelayMs })
      const waitMs = err.status === 429 && err.retryAfterMs != null
        ? Math.min(maxRateLimitWaitMs, err.retryAfterMs)
        : Math.min(maxDelayMs, err.retryAfterMs ?? backoffMs)
      request.onWait?.({ reason: err.status === 429 ? 'rate limited' : err.status != null ? `HTTP ${err.status}` : 'connection lost', seconds: Math.ceil(waitMs / 1000) })
      await pause(waitMs, signal)
    }
  }
  return await finish(job, destination)
}

async function pause (ms: number, signal: AbortSignal | undefined): Promise<void> {
  try {
    await sleep(ms, undefined, { signal })
  } catch (err) {
    if (signal?.aborted === true) throw signal.reason // timers reject with their own AbortError, not the reason
    throw err
  }
}
