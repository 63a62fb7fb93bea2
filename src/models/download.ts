// The download engine: one file from a URL to disk, resumable, verified, bounded. It knows HTTP only as a client
// and nothing of the database; the model store decides what to fetch, where it goes and what it may cost. The .part
// file is part-file.ts's business; progress and the idle alarm download-progress.ts's. What is left (~430 lines) is
// one state machine, the attempt loop and how it reads each answer of the hub and its CDN, and is read as one.
import { createHash } from 'node:crypto'
import { open, rm } from 'node:fs/promises'
import { setTimeout as sleep } from 'node:timers/promises'
import { InvalidInputError } from '../errors.ts'
import { backoffDelayMs } from '../wire/index.ts'
import { DownloadFailedError, DownloadNotFoundError, DownloadTooLargeError, HubUnreachableError, IntegrityError } from './errors.ts'
import { IdleWatch, ProgressReporter, type DownloadProgress } from './download-progress.ts'
import { rateLimitWaitMs, unreachableCause } from './hub.ts'
import { commitPart, readPart, type Part } from './part-file.ts'

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

export interface DownloadResult { path: string, sha256: string, sizeBytes: number }

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

const MAX_REDIRECTS = 10
const SHA256_HEX = /^[0-9a-f]{64}$/

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

interface Job {
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
class RetryableError extends Error {
  readonly status: number | null
  readonly retryAfterMs: number | null
  constructor (message: string, details: { status?: number | null, retryAfterMs?: number | null, cause?: unknown }) {
    super(message, { cause: details.cause })
    this.status = details.status ?? null
    this.retryAfterMs = details.retryAfterMs ?? null
  }
}

/** One request: streams what the server sends into the .part, or says why it could not. */
async function attempt (job: Job): Promise<'complete' | 'stale'> {
  const idle = new IdleWatch(job.idleTimeoutMs)
  try {
    return await attemptWatched(job, idle)
  } finally {
    idle.stop()
  }
}

async function attemptWatched (job: Job, idle: IdleWatch): Promise<'complete' | 'stale'> {
  const { response, linked } = await openResponse(job, idle)
  const status = response.status
  if (status === 200 || status === 206) {
    let totalBytes: number | null
    if (status === 206) {
      const range = parseContentRange(response.headers.get('content-range'))
      if (range == null || range.start !== job.part.receivedBytes) {
        await response.body?.cancel()
        throw new DownloadFailedError(job.url,
          `asked for bytes from ${job.part.receivedBytes}, got Content-Range ${response.headers.get('content-range')}`,
          { status, attempts: job.attempts })
      }
      totalBytes = range.totalBytes
    } else {
      // A 200 to a Range request means the server ignored it: what we hold cannot be continued
      if (job.part.receivedBytes > 0) await restartPart(job)
      totalBytes = contentLength(response)
    }
    totalBytes ??= linked.sizeBytes ?? job.expectedSize
    await checkAnnounced(job, { sha256: null, sizeBytes: totalBytes }, response)
    try {
      await receive(job, response, totalBytes, idle)
    } catch (err) {
      if (err instanceof DownloadTooLargeError) await discardPart(job) // over budget: nothing worth resuming
      throw err
    }
    return 'complete'
  }
  if (status === 416) {
    await response.body?.cancel()
    // Nothing left after our offset: either the .part is the whole file (a crash before the rename) or it is stale
    const totalBytes = parseContentRange(response.headers.get('content-range'))?.totalBytes ?? linked.sizeBytes
    return totalBytes === job.part.receivedBytes ? 'complete' : 'stale'
  }
  // The hub tells a missing repo, file or revision by X-Error-Code, also on the 401 an anonymous client gets for it
  const errorCode = response.headers.get('x-error-code')
  if (status === 404 || errorCode === 'RepoNotFound' || errorCode === 'EntryNotFound' || errorCode === 'RevisionNotFound') {
    const text = await errorText(response)
    throw new DownloadNotFoundError(job.url, `not found (${errorCode == null ? text : `${errorCode}: ${text}`})`, { status, attempts: job.attempts })
  }
  if (errorCode === 'GatedRepo') {
    await response.body?.cancel()
    throw new DownloadFailedError(job.url, `HTTP ${status}: the repository is gated: accept its terms on the hub and set $HF_TOKEN`, { status, attempts: job.attempts })
  }
  if (status === 429 || status >= 500) {
    await response.body?.cancel()
    throw new RetryableError(`HTTP ${status}`, { status, retryAfterMs: rateLimitWaitMs(response.headers) })
  }
  throw new DownloadFailedError(job.url, `HTTP ${status} (${await errorText(response)})`,
    { status, attempts: job.attempts })
}

interface Linked { sha256: string | null, sizeBytes: number | null }

/**
 * GET with our Range, following redirects ourselves: the token must not travel to another origin. What the file is
 * (X-Linked-*) is taken from the last hop on the hub's own origin that says it: a renamed repo first answers a
 * relative redirect that says nothing, and only the hop to the CDN names the LFS object.
 */
async function openResponse (job: Job, idle: IdleWatch): Promise<{ response: Response, linked: Linked }> {
  const headers: Record<string, string> = {}
  if (job.part.receivedBytes > 0) headers.Range = `bytes=${job.part.receivedBytes}-`
  if (job.token != null) headers.Authorization = `Bearer ${job.token}`
  let linked: Linked = { sha256: null, sizeBytes: null }
  let current = new URL(job.url)
  const hubOrigin = current.origin
  for (let hop = 0; hop <= MAX_REDIRECTS; hop++) {
    let response: Response
    try {
      const signal = job.signal == null ? idle.signal : AbortSignal.any([job.signal, idle.signal])
      response = await fetch(current, { headers, redirect: 'manual', signal })
    } catch (err) {
      if (job.signal?.aborted === true) throw job.signal.reason
      if (idle.signal.aborted) throw new RetryableError(`${current.host} did not answer within ${job.idleTimeoutMs} ms`, { cause: err })
      // No connection to a server that never answered (offline, a wrong HF_ENDPOINT, a firewall): retrying only makes
      // the user wait for the same answer
      const unreachable = unreachableCause(err)
      if (unreachable != null && !job.answered.has(current.origin)) {
        throw new HubUnreachableError(current.origin === hubOrigin ? `the model hub at ${hubOrigin}` : `${current.host}, where the hub sent the file`, unreachable)
      }
      throw new RetryableError(`cannot reach ${current.host}: ${describe(err)}`, { cause: err })
    }
    job.answered.add(current.origin)
    if (current.origin === hubOrigin) {
      const announced = readLinked(response.headers)
      if (announced.sha256 != null || announced.sizeBytes != null) {
        linked = announced
        await checkAnnounced(job, linked, response) // before a redirect to the CDN spends any bandwidth
      }
      pinRevision(job, response.headers)
    }
    const location = response.headers.get('location')
    if (response.status < 300 || response.status >= 400 || response.status === 304 || location == null) {
      return { response, linked }
    }
    await response.body?.cancel()
    const next = new URL(location, current)
    if (next.origin !== current.origin) delete headers.Authorization
    current = next
  }
  throw new DownloadFailedError(job.url, `more than ${MAX_REDIRECTS} redirects`, { attempts: job.attempts })
}

/** Streams the body into the .part, hashing as it goes; a connection lost mid-body is retryable from where it stopped. */
async function receive (job: Job, response: Response, totalBytes: number | null, idle: IdleWatch): Promise<void> {
  if (response.body == null) throw new RetryableError('empty response body', { status: response.status })
  job.progress.begin(job.part.receivedBytes)
  const file = await open(job.partPath, 'a')
  let reading = true
  try {
    for await (const chunk of response.body) {
      idle.reset()
      reading = false
      if (job.maxBytes != null && job.part.receivedBytes + chunk.length > job.maxBytes) {
        throw new DownloadTooLargeError(job.url, job.part.receivedBytes + chunk.length, job.maxBytes, 'received')
      }
      await file.write(chunk)
      job.part.hash.update(chunk) // after the write, so the hash never covers bytes the .part lacks
      job.part.receivedBytes += chunk.length
      job.progress.update(job.part.receivedBytes, totalBytes)
      reading = true
    }
  } catch (err) {
    if (job.signal?.aborted === true) throw job.signal.reason
    if (idle.signal.aborted) {
      throw new RetryableError(`stalled: no data for ${job.idleTimeoutMs} ms after ${job.part.receivedBytes} bytes`,
        { status: response.status, cause: err })
    }
    // Only a failed read is the network's fault; a failed write (disk full) or a throwing onProgress is not
    if (reading) {
      throw new RetryableError(`connection lost after ${job.part.receivedBytes} bytes: ${describe(err)}`,
        { status: response.status, cause: err })
    }
    throw err
  } finally {
    await file.close()
  }
  if (totalBytes != null && job.part.receivedBytes < totalBytes) {
    throw new RetryableError(`connection closed at ${job.part.receivedBytes} of ${totalBytes} bytes`, { status: response.status })
  }
}

/** Verifies the .part, makes it durable, and renames it into place. */
async function finish (job: Job, destination: string): Promise<DownloadResult> {
  job.onVerifying?.()
  const { receivedBytes } = job.part
  const sha256 = job.part.hash.digest('hex')
  if (job.expectedSize != null && receivedBytes !== job.expectedSize) {
    await discardPart(job)
    throw new IntegrityError(destination, 'size', String(job.expectedSize), String(receivedBytes))
  }
  if (job.expectedSha256 != null && sha256 !== job.expectedSha256) {
    await discardPart(job)
    throw new IntegrityError(destination, 'sha256', job.expectedSha256, sha256)
  }
  await commitPart(job.partPath, destination)
  job.progress.finish(receivedBytes)
  return { path: destination, sha256, sizeBytes: receivedBytes }
}

async function restartPart (job: Job): Promise<void> {
  await rm(job.partPath, { force: true })
  job.part = { hash: createHash('sha256'), receivedBytes: 0 }
}

async function discardPart (job: Job): Promise<void> {
  await rm(job.partPath, { force: true })
}

/** Adopts or checks what the server says of the file (the hub's X-Linked-* describe the LFS object, the CDN's
 * headers do not), and refuses one that cannot be right before spending bandwidth on it. */
async function checkAnnounced (job: Job, announced: Linked, response: Response): Promise<void> {
  const fail = async (err: Error): Promise<never> => {
    await response.body?.cancel()
    await discardPart(job)
    throw err
  }
  if (announced.sha256 != null) {
    job.expectedSha256 ??= announced.sha256
    if (job.expectedSha256 !== announced.sha256) {
      await fail(new IntegrityError(job.url, 'sha256', job.expectedSha256, `${announced.sha256} (announced by the server)`))
    }
  }
  if (announced.sizeBytes != null && job.expectedSize != null && announced.sizeBytes !== job.expectedSize) {
    await fail(new IntegrityError(job.url, 'size', String(job.expectedSize), `${announced.sizeBytes} (announced by the server)`))
  }
  await checkDeclaredSize(job, announced.sizeBytes, response)
}

/** Refuses a file larger than the budget before spending bandwidth on it. */
async function checkDeclaredSize (job: Job, sizeBytes: number | null, response?: Response): Promise<void> {
  const size = Math.max(sizeBytes ?? 0, job.part.receivedBytes)
  if (job.maxBytes == null || size <= job.maxBytes) return
  await response?.body?.cancel()
  await discardPart(job)
  throw new DownloadTooLargeError(job.url, size, job.maxBytes, 'declared')
}

/**
 * A download asked for a branch (`/resolve/main/`) is pinned to the commit the hub resolved it to, so a retry or a
 * resume cannot get bytes of a newer commit pushed meanwhile (its sha256 would fail the whole download).
 */
function pinRevision (job: Job, headers: Headers): void {
  const commit = headers.get('x-repo-commit')?.toLowerCase()
  if (commit == null || !/^[0-9a-f]{40}$/.test(commit)) return
  const url = new URL(job.url)
  const match = /^(.*\/resolve\/)([^/]+)(\/.+)$/.exec(url.pathname)
  if (match == null || match[2] === commit) return
  url.pathname = `${match[1]}${commit}${match[3]}`
  job.url = url.toString()
  job.onPinned?.(commit)
}

function readLinked (headers: Headers): Linked {
  // The hub quotes the etag; only a sha256 (an LFS object) identifies the bytes, a git blob id does not
  const etag = headers.get('x-linked-etag')?.replace(/^W\//, '').replaceAll('"', '').toLowerCase() ?? null
  const size = headers.get('x-linked-size')
  return {
    sha256: etag != null && SHA256_HEX.test(etag) ? etag : null,
    sizeBytes: size != null && /^\d+$/.test(size) ? Number(size) : null
  }
}

function contentLength (response: Response): number | null {
  const value = response.headers.get('content-length')
  return value != null && /^\d+$/.test(value) ? Number(value) : null
}

// `bytes 100-199/1000`, or `bytes */1000` on a 416; a `*` total is unknown
function parseContentRange (header: string | null): { start: number | null, totalBytes: number | null } | null {
  const match = header == null ? null : /^bytes (?:(\d+)-\d+|\*)\/(\d+|\*)$/.exec(header.trim())
  if (match == null) return null
  return {
    start: match[1] == null ? null : Number(match[1]),
    totalBytes: match[2] === '*' ? null : Number(match[2])
  }
}

async function errorText (response: Response): Promise<string> {
  // The hub explains refusals in JSON ({"error": "..."}): worth passing on, but never a whole HTML page
  let text: string
  try {
    text = await response.text()
  } catch (err) {
    return `unreadable body: ${describe(err)}`
  }
  try {
    const body: unknown = JSON.parse(text)
    if (typeof body === 'object' && body != null && 'error' in body && typeof body.error === 'string') return body.error
  } catch (err) {
    if (!(err instanceof SyntaxError)) throw err // not JSON: fall through to the raw text
  }
  return text.slice(0, 200) || 'no details'
}

async function pause (ms: number, signal: AbortSignal | undefined): Promise<void> {
  try {
    await sleep(ms, undefined, { signal })
  } catch (err) {
    if (signal?.aborted === true) throw signal.reason // timers reject with their own AbortError, not the reason
    throw err
  }
}

function describe (err: unknown): string {
  if (!(err instanceof Error)) return String(err)
  // undici hides the socket's story in the cause: "fetch failed" / "terminated" alone says little
  return err.cause instanceof Error ? `${err.message} (${err.cause.message})` : err.message
}
