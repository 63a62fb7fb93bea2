import { readFileSync } from 'node:fs'
import { isIPv4 } from 'node:net'
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
 * Whether `url` names a node on this machine, reached over loopback: 127.0.0.0/8, ::1 (also as ::ffff:127.x.x.x)
 * or localhost. Only such a node may be sent the local admin-token; any other host could be anyone's node, and the
 * token would make its owner an admin of ours. A name that merely resolves to this machine does not count: the CLI
 * cannot know where it resolves once the request leaves.
 */
export function isLoopbackUrl (url: string): boolean {
  let host: string
  try {
    host = new URL(url).hostname.toLowerCase()
  } catch (err) {
    // Not a URL at all: fetch refuses it with its own message later, and nothing is sent anywhere
    if (err instanceof TypeError) return false
    throw err
  }
  if (host === 'localhost' || host === 'localhost.') return true
  // The URL parser writes IPv4 in dotted decimal (127.1 becomes 127.0.0.1) and IPv6 in brackets, compressed
  if (isIPv4(host)) return host.startsWith('127.')
  if (host === '[::1]') return true
  // An IPv4-mapped loopback address, which the parser writes in hex: [::ffff:7f00:1]
  const mapped = /^\[::ffff:([0-9a-f]{1,4}):[0-9a-f]{1,4}\]$/.exec(host)
  return mapped != null && parseInt(mapped[1], 16) >> 8 === 127
}

/** Why a client sends no key, for the message of a 401: there is none to send, or it is not sent to that host. */
type NoKeyReason = { kind: 'no-token', path: string } | { kind: 'remote' }

/**
 * The CLI's only way to the node: HTTP, like any other client. Without --api-key (or $MESHNODE_API_KEY) it sends the
 * local node's admin-token to a node on this machine (isLoopbackUrl), so the owner can administer it whether network
 * access is on or not; to any other host it sends no key.
 */
export class ApiClient {
  readonly baseUrl: string
  readonly #authorization: string | null
  readonly #noKey: NoKeyReason | null

  constructor (options: ClientOptions) {
    const port = options.port ?? DEFAULT_PORT
    // The OpenAI-style base URL (`…/v1`) is accepted too: our paths carry their own /v1
    this.baseUrl = (options.url ?? `http://127.0.0.1:${port}`).replace(/\/+$/, '').replace(/\/v1$/, '')
    const fromEnv = process.env.MESHNODE_API_KEY === '' ? undefined : process.env.MESHNODE_API_KEY
    let key = options.apiKey ?? fromEnv ?? null
    this.#noKey = null
    if (key == null) {
      if (isLoopbackUrl(this.baseUrl)) {
        const path = join(options.dataDir ?? defaultDataDir(), ADMIN_TOKEN_FILE)
        key = readAdminToken(path)
        if (key == null) this.#noKey = { kind: 'no-token', path }
      } else {
        this.#noKey = { kind: 'remote' }
      }
    }
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
      const message = envelope?.error?.message ?? `HTTP ${response.status}: ${text.slice(0, 200)}`
      throw new ApiError(response.status, envelope?.error?.type ?? 'http_error', response.status === 401 ? this.#unauthorized(message) : message)
    }
    return response
  }

  /**
   * A 401 in words the user can act on when this client sent no key: the node's own message ("send Authorization:
   * Bearer <key>") names a header, not where the key should have come from.
   */
  #unauthorized (message: string): string {
    if (this.#noKey?.kind === 'no-token') {
      return `No admin token found at ${this.#noKey.path}, and the node asks for a key: pass --data-dir <the node's data dir> or --api-key <key>`
    }
    if (this.#noKey?.kind === 'remote') {
      return `The node at ${this.baseUrl} asks for an API key: pass --api-key <key> (the local admin token is sent only to a node on this machine)`
    }
    return message
  }

  async request<T> (method: string, path: string, body?: unknown): Promise<T> {
    const response = await this.fetch(method, path, body)
    return await response.json() as T
  }
}

function readAdminToken (path: string): string | null {
  try {
    return readFileSync(path, 'utf8').trim()
  } catch (err) {
    // No local node data (never started here, or another --data-dir): go without; the API says if a key is needed.
    if ((err as NodeJS.ErrnoException).code === 'ENOENT' || (err as NodeJS.ErrnoException).code === 'EACCES') return null
    throw err
  }
}
