// What we ask the Hugging Face hub before a download: which files a repo has (to resolve `:QUANT`), and a file's size
// and sha256 (to judge the storage budget and verify the bytes). The file itself is fetched by download.ts.
import { NotFoundError, PermissionError, UnavailableError } from '../errors.ts'

export const DEFAULT_HUB_URL = 'https://huggingface.co'
const DEFAULT_TIMEOUT_MS = 15_000
const SHA256_HEX = /^[0-9a-f]{64}$/

export interface HubFileMetadata {
  /** X-Linked-Size of an LFS file, or Content-Length of a small git file; null when the hub said neither. */
  sizeBytes: number | null
  /** X-Linked-Etag when it is a sha256 (LFS files); null otherwise. */
  sha256: string | null
}

export interface HubClientOptions {
  /** `$HF_ENDPOINT`. Default https://huggingface.co */
  url?: string
  /** `$HF_TOKEN`, sent as a Bearer token to the hub's origin only. Default none. */
  token?: string | null
  /** Per request. Default 15000. */
  timeoutMs?: number
}

export class HubClient {
  readonly url: string
  readonly #token: string | null
  readonly #timeoutMs: number

  constructor (options: HubClientOptions = {}) {
    this.url = (options.url ?? DEFAULT_HUB_URL).replace(/\/+$/, '')
    this.#token = options.token == null || options.token === '' ? null : options.token
    this.#timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS
  }

  get token (): string | null {
    return this.#token
  }

  /** Where the file's bytes are: the hub's resolve URL, which redirects LFS files to its CDN. */
  fileUrl (repo: string, file: string): string {
    return `${this.url}/${encodePath(repo)}/resolve/main/${encodePath(file)}`
  }

  /** The paths of every file in the repo. NotFoundError for an unknown repo; PermissionError for a gated one. */
  async listFiles (repo: string, signal?: AbortSignal): Promise<string[]> {
    const response = await this.#request('GET', `${this.url}/api/models/${encodePath(repo)}`, `repo ${repo}`, signal)
    const body = await response.json() as { siblings?: Array<{ rfilename?: unknown }> }
    return (body.siblings ?? []).map((s) => s.rfilename).filter((name): name is string => typeof name === 'string')
  }

  /** Size and sha256 of one file, from a HEAD that does not follow the redirect to the CDN. */
  async fileMetadata (repo: string, file: string, signal?: AbortSignal): Promise<HubFileMetadata> {
    const response = await this.#request('HEAD', this.fileUrl(repo, file), `${repo}/${file}`, signal)
    const etag = response.headers.get('x-linked-etag')?.replace(/^W\//, '').replaceAll('"', '').toLowerCase() ?? null
    const size = response.headers.get('x-linked-size') ??
      (response.status === 200 ? response.headers.get('content-length') : null)
    return {
      sizeBytes: size != null && /^\d+$/.test(size) ? Number(size) : null,
      sha256: etag != null && SHA256_HEX.test(etag) ? etag : null
    }
  }

  async #request (method: string, url: string, what: string, signal: AbortSignal | undefined): Promise<Response> {
    const headers: Record<string, string> = { 'accept-encoding': 'identity' }
    if (this.#token != null) headers.authorization = `Bearer ${this.#token}`
    const timeout = AbortSignal.timeout(this.#timeoutMs)
    let response: Response
    try {
      response = await fetch(url, {
        method,
        headers,
        redirect: 'manual',
        signal: signal == null ? timeout : AbortSignal.any([signal, timeout])
      })
    } catch (err) {
      if (signal?.aborted === true) throw signal.reason
      const cause = err instanceof Error && err.cause instanceof Error ? `: ${err.cause.message}` : ''
      throw new UnavailableError(`Cannot reach the model hub at ${this.url} for ${what} (${(err as Error).message}${cause})`)
    }
    const status = response.status
    if (status === 200 || (status >= 300 && status < 400)) return response
    await response.body?.cancel()
    if (status === 404) throw new NotFoundError(`Not found on the model hub: ${what}`)
    if (status === 401 || status === 403) {
      throw new PermissionError(`The model hub refused access to ${what} (HTTP ${status}): the repository is gated or private; ` +
        (this.#token == null ? 'set $HF_TOKEN' : 'check $HF_TOKEN'))
    }
    throw new UnavailableError(`The model hub answered HTTP ${status} for ${what}`)
  }
}

function encodePath (path: string): string {
  return path.split('/').map(encodeURIComponent).join('/')
}
