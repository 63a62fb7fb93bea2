// What we ask the Hugging Face hub before a download: which files a repo has (to resolve `:QUANT`), and a file's size,
// sha256 and commit (to judge the storage budget, verify the bytes and pin the download). The file itself is fetched
// by download.ts. The hub's own ways are followed: a renamed repo answers a relative redirect to its new
// name, errors are told apart by X-Error-Code (a missing repo is a 401 to an anonymous client), and a 429 says when
// to come back in a `RateLimit` header rather than Retry-After.
import { setTimeout as sleep } from 'node:timers/promises'
import { BusyError, NotFoundError, PermissionError, UnavailableError } from '../errors.ts'
import { HubUnreachableError } from './errors.ts'

export const DEFAULT_HUB_URL = 'https://huggingface.co'
const DEFAULT_TIMEOUT_MS = 15_000
/** A renamed repo redirects once; more than this many hops within the hub is a loop. */
const MAX_HUB_REDIRECTS = 5
const SHA256_HEX = /^[0-9a-f]{64}$/
const COMMIT_HEX = /^[0-9a-f]{40}$/

export interface HubFileMetadata {
  /** X-Linked-Size of an LFS file, or Content-Length of a small git file; null when the hub said neither. */
  sizeBytes: number | null
  /** X-Linked-Etag when it is a sha256 (LFS files); null otherwise. */
  sha256: string | null
  /** X-Repo-Commit: the commit the hub resolved the revision to; the download fetches exactly that one. */
  commit: string | null
}

export interface HubFileList {
  files: string[]
  /** The commit the listing is of (`sha`), so the file chosen from it is fetched from the same commit. */
  commit: string | null
}

export interface HubClientOptions {
  /** `$HF_ENDPOINT`. Default https://huggingface.co */
  url?: string
  /** `$HF_TOKEN`, sent as a Bearer token to the hub's origin only. Default none. */
  token?: string | null
  /** Per request. Default 15000. */
  timeoutMs?: number
  /**
   * A rate limit this short is waited out before answering; a longer one is a BusyError that tells the caller when to
   * come back (these requests are made while a client waits for its answer). Default 30000.
   */
  maxRateLimitWaitMs?: number
}

export class HubClient {
  readonly url: string
  readonly #origin: string
  readonly #token: string | null
  readonly #timeoutMs: number
  readonly #maxRateLimitWaitMs: number

  constructor (options: HubClientOptions = {}) {
    this.url = (options.url ?? DEFAULT_HUB_URL).replace(/\/+$/, '')
    this.#origin = new URL(this.url).origin
    this.#token = options.token == null || options.token === '' ? null : options.token
    this.#timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS
    this.#maxRateLimitWaitMs = options.maxRateLimitWaitMs ?? 30_000
  }

  get token (): string | null {
    return this.#token
  }

  /** Where the file's bytes are: the hub's resolve URL at `revision` (a commit pins it), which redirects LFS files to its CDN. */
  fileUrl (repo: string, file: string, revision = 'main'): string {
    return `${this.url}/${encodePath(repo)}/resolve/${encodeURIComponent(revision)}/${encodePath(file)}`
  }

  /** The paths of every file in the repo, and the commit they are of. NotFoundError for an unknown repo; PermissionError for a gated one. */
  async listFiles (repo: string, signal?: AbortSignal): Promise<HubFileList> {
    const { response } = await this.#request('GET', `${this.url}/api/models/${encodePath(repo)}`, `repo ${repo}`, signal)
    const body = await response.json() as { siblings?: Array<{ rfilename?: unknown }>, sha?: unknown }
    return {
      files: (body.siblings ?? []).map((s) => s.rfilename).filter((name): name is string => typeof name === 'string'),
      commit: typeof body.sha === 'string' && COMMIT_HEX.test(body.sha) ? body.sha : null
    }
  }

  /**
   * Size, sha256 and commit of one file, from a HEAD that follows the hub's own redirects (a renamed repo) but not
   * the one to the CDN: the X-Linked-* headers are the last hub hop's.
   */
  async fileMetadata (repo: string, file: string, options: { revision?: string, signal?: AbortSignal } = {}): Promise<HubFileMetadata> {
    const { response, hubHeaders } = await this.#request('HEAD', this.fileUrl(repo, file, options.revision), `${repo}/${file}`, options.signal)
    const etag = hubHeaders.get('x-linked-etag')?.replace(/^W\//, '').replaceAll('"', '').toLowerCase() ?? null
    const size = hubHeaders.get('x-linked-size') ??
      (response.status === 200 ? response.headers.get('content-length') : null)
    const commit = hubHeaders.get('x-repo-commit')?.toLowerCase() ?? null
    return {
      sizeBytes: size != null && /^\d+$/.test(size) ? Number(size) : null,
      sha256: etag != null && SHA256_HEX.test(etag) ? etag : null,
      commit: commit != null && COMMIT_HEX.test(commit) ? commit : null
    }
  }

  /** One request, its redirects within the hub followed and its rate limits waited out (up to maxRateLimitWaitMs). */
  async #request (method: string, url: string, what: string, signal: AbortSignal | undefined): Promise<{ response: Response, hubHeaders: Headers }> {
    for (;;) {
      const result = await this.#follow(method, url, what, signal)
      if (result.response.status !== 429) return result
      const waitMs = rateLimitWaitMs(result.response.headers) ?? 1000
      await result.response.body?.cancel()
      if (waitMs > this.#maxRateLimitWaitMs) {
        throw new BusyError(`The model hub is limiting our requests (${what}); try again in ${Math.ceil(waitMs / 1000)} s`, Math.ceil(waitMs / 1000))
      }
      try {
        await sleep(waitMs, undefined, { signal })
      } catch (err) {
        if (signal?.aborted === true) throw signal.reason // timers reject with their own AbortError
        throw err
      }
    }
  }

  async #follow (method: string, url: string, what: string, signal: AbortSignal | undefined): Promise<{ response: Response, hubHeaders: Headers }> {
    const headers: Record<string, string> = { 'accept-encoding': 'identity' }
    if (this.#token != null) headers.authorization = `Bearer ${this.#token}`
    let current = new URL(url)
    for (let hop = 0; ; hop++) {
      const timeout = AbortSignal.timeout(this.#timeoutMs)
      let response: Response
      try {
        response = await fetch(current, { method, headers, redirect: 'manual', signal: signal == null ? timeout : AbortSignal.any([signal, timeout]) })
      } catch (err) {
        if (signal?.aborted === true) throw signal.reason
        const unreachable = unreachableCause(err)
        if (unreachable != null) throw new HubUnreachableError(`the model hub at ${this.url}`, unreachable)
        const cause = err instanceof Error && err.cause instanceof Error ? `: ${err.cause.message}` : ''
        throw new UnavailableError(`Cannot reach the model hub at ${this.url} for ${what} (${(err as Error).message}${cause})`)
      }
      const status = response.status
      const location = response.headers.get('location')
      if (status >= 300 && status < 400 && location != null) {
        const next = new URL(location, current) // the hub's redirect for a renamed repo is relative
        if (next.origin !== this.#origin) return { response, hubHeaders: response.headers } // to the CDN: the caller's business
        await response.body?.cancel()
        if (hop >= MAX_HUB_REDIRECTS) throw new UnavailableError(`The model hub redirected ${what} more than ${MAX_HUB_REDIRECTS} times`)
        current = next
        continue
      }
      if (status === 200 || status === 429) return { response, hubHeaders: response.headers }
      await response.body?.cancel()
      throw hubError(status, response.headers, what, this.#token != null)
    }
  }
}

/** The hub's refusal in our words: by X-Error-Code first (a missing repo is a 401 to an anonymous client), then by status. */
export function hubError (status: number, headers: Headers, what: string, hasToken: boolean): Error {
  const code = headers.get('x-error-code')
  if (code === 'RepoNotFound' || code === 'EntryNotFound' || code === 'RevisionNotFound' || status === 404) {
    return new NotFoundError(`Not found on the model hub: ${what}${code == null ? '' : ` (${code})`}`)
  }
  if (code === 'GatedRepo' || status === 401 || status === 403) {
    const gated = code === 'GatedRepo' ? 'the repository is gated: accept its terms on the hub, then ' : 'the repository is gated or private; '
    return new PermissionError(`The model hub refused access to ${what} (HTTP ${status}): ${gated}` + (hasToken ? 'check $HF_TOKEN' : 'set $HF_TOKEN'))
  }
  return new UnavailableError(`The model hub answered HTTP ${status} for ${what}`)
}

/**
 * How long a 429 asks us to wait: `Retry-After` (seconds or a date), or the reset of the IETF `RateLimit` header the
 * hub sends instead (`"api";r=0;t=55`: t seconds until the window resets). Null when it says neither.
 */
export function rateLimitWaitMs (headers: Headers): number | null {
  const retryAfter = headers.get('retry-after')?.trim()
  if (retryAfter != null && retryAfter !== '') {
    if (/^\d+$/.test(retryAfter)) return Number(retryAfter) * 1000
    const at = Date.parse(retryAfter)
    if (!Number.isNaN(at)) return Math.max(0, at - Date.now())
  }
  const rateLimit = headers.get('ratelimit')
  const reset = rateLimit == null ? null : /(?:^|;)\s*t=(\d+)/.exec(rateLimit)
  return reset == null ? null : Number(reset[1]) * 1000
}

/** The socket errors of a connection that never opened: no such name, or no answer for now from DNS, no listener, no route. */
const UNREACHABLE_CODES = new Set(['ENOTFOUND', 'EAI_AGAIN', 'EAI_NONAME', 'ECONNREFUSED', 'ENETUNREACH', 'EHOSTUNREACH', 'EADDRNOTAVAIL'])

/**
 * Why a failed fetch never reached its server (`getaddrinfo ENOTFOUND huggingface.co`), or null when it did or may
 * have (a reset, a timeout): fetch hides the socket's error in its cause, an AggregateError when every address of
 * the name was tried.
 */
export function unreachableCause (err: unknown): string | null {
  const cause = err instanceof Error ? err.cause : null
  if (!(cause instanceof Error)) return null
  const errors = cause instanceof AggregateError ? [...cause.errors, cause] : [cause]
  const found = errors.find((e): e is NodeJS.ErrnoException => e instanceof Error && UNREACHABLE_CODES.has((e as NodeJS.ErrnoException).code ?? ''))
  if (found == null) return null
  return found.message === '' ? String(found.code) : found.message
}

function encodePath (path: string): string {
  return path.split('/').map(encodeURIComponent).join('/')
}
