import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { ADMIN_TOKEN_FILE, DEFAULT_PORT, defaultDataDir } from '../config.ts'
import type { ErrorEnvelope } from '../http/errors.ts'

export interface ClientOptions {
  url?: string
  port?: string
  apiKey?: string
  dataDir?: string
  json?: boolean
}

/** A failure the API answered with; the CLI prints its message and exits non-zero. */
export class ApiError extends Error {
  override name = 'ApiError'
  readonly status: number
  readonly type: string
  constructor (status: number, type: string, message: string) {
    super(message)
    this.status = status
    this.type = type
  }
}

/**
 * The CLI's only way to the node: HTTP, like any other client. Without --api-key it sends the node's local
 * admin-token, so the owner can administer the node whether network access is on or not.
 */
export class ApiClient {
  readonly baseUrl: string
  readonly #authorization: string | null

  constructor (options: ClientOptions) {
    const port = options.port ?? DEFAULT_PORT
    // The OpenAI-style base URL (`…/v1`) is accepted too: our paths carry their own /v1
    this.baseUrl = (options.url ?? `http://127.0.0.1:${port}`).replace(/\/+$/, '').replace(/\/v1$/, '')
    const fromEnv = process.env.MESHNODE_API_KEY === '' ? undefined : process.env.MESHNODE_API_KEY
    const key = options.apiKey ?? fromEnv ?? readAdminToken(options.dataDir ?? defaultDataDir())
    this.#authorization = key == null ? null : `Bearer ${key}`
  }

  async get<T> (path: string): Promise<T> {
    return await this.request<T>('GET', path)
  }

  async post<T> (path: string, body?: unknown): Promise<T> {
    return await this.request<T>('POST', path, body)
  }

  async patch<T> (path: string, body: unknown): Promise<T> {
    return await this.request<T>('PATCH', path, body)
  }

  /** Sends a request and returns the raw response, for streams. Throws ApiError on an error status. */
  async fetch (method: string, path: string, body?: unknown, signal?: AbortSignal): Promise<Response> {
    const headers: Record<string, string> = {}
    if (this.#authorization != null) headers.authorization = this.#authorization
    if (body !== undefined) headers['content-type'] = 'application/json'
    let response: Response
    try {
      response = await fetch(this.baseUrl + path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), signal })
    } catch (err) {
      if (signal?.aborted === true) throw err
      const reason = (err as Error).cause instanceof Error ? ((err as Error).cause as Error).message : (err as Error).message
      throw new ApiError(0, 'connection_error', `Cannot reach the node at ${this.baseUrl} (${reason}). Is it running? ` +
        'Start it with: meshnode serve (or npm start in the meshnode folder), or point --url or --port at a running one')
    }
    if (!response.ok) {
      const text = await response.text()
      let envelope: ErrorEnvelope | null = null
      try {
        envelope = JSON.parse(text) as ErrorEnvelope
      } catch (err) {
        // Not our envelope (a proxy's page, say): show the status and text as they are.
        if (!(err instanceof SyntaxError)) throw err
      }
      throw new ApiError(response.status, envelope?.error?.type ?? 'http_error', envelope?.error?.message ?? `HTTP ${response.status}: ${text.slice(0, 200)}`)
    }
    return response
  }

  async request<T> (method: string, path: string, body?: unknown): Promise<T> {
    const response = await this.fetch(method, path, body)
    return await response.json() as T
  }
}

function readAdminToken (dataDir: string): string | null {
  try {
    return readFileSync(join(dataDir, ADMIN_TOKEN_FILE), 'utf8').trim()
  } catch (err) {
    // No local node data (a remote node, or never started here): go without; the API says if a key is needed.
    if ((err as NodeJS.ErrnoException).code === 'ENOENT' || (err as NodeJS.ErrnoException).code === 'EACCES') return null
    throw err
  }
}
