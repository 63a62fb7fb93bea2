// One attempt of a download: a GET with our Range, the redirects followed by hand (the token stays on the hub's
// origin), each answer of the hub and its CDN read for what it means (resume, start over, not found, later), and the
// body streamed into the .part. A failure worth another try is a RetryableError; download.ts decides when.
import { open } from 'node:fs/promises'
import { DownloadFailedError, DownloadNotFoundError, DownloadTooLargeError, HubUnreachableError } from './errors.ts'
import { IdleWatch } from './download-progress.ts'
import { RetryableError, discardPart, restartPart, type Job } from './download-job.ts'
import { checkAnnounced, readLinked, type Linked } from './download-verify.ts'
import { rateLimitWaitMs, unreachableCause } from './hub.ts'

const MAX_REDIRECTS = 10

/** One request: streams what the server sends into the .part, or says why it could not. */
export async function attempt (job: Job): Promise<'complete' | 'stale'> {
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

function describe (err: unknown): string {
  if (!(err instanceof Error)) return String(err)
  // undici hides the socket's story in the cause: "fetch failed" / "terminated" alone says little
  return err.cause instanceof Error ? `${err.message} (${err.cause.message})` : err.message
}
