// The dashboard's only way to the node: same-origin fetch. The browser sends the session cookie by itself (and an
// Origin header on every POST/PATCH, which the node's CSRF rule asks for); no key or token is ever kept in the page.

/** A failure the node answered in its error envelope (docs/API.md, Errors). */
export class ApiError extends Error {
  override name = 'ApiError'
  readonly status: number
  readonly type: string
  readonly param: string | null
  readonly code: string | null
  constructor (status: number, type: string, message: string, param: string | null = null, code: string | null = null) {
    super(message)
    this.status = status
    this.type = type
    this.param = param
    this.code = code
  }
}

type Listener = () => void
const signedOutListeners = new Set<Listener>()

/** Called when the node answers 401: the session ended (expired, revoked key, node restarted). */
export function onSignedOut (listener: Listener): () => void {
  signedOutListeners.add(listener)
  return () => { signedOutListeners.delete(listener) }
}

/** Sends a request and throws ApiError on an error status. Non-GET requests always carry a JSON body. */
export async function call (method: string, path: string, body?: unknown, signal?: AbortSignal): Promise<Response> {
  const init: RequestInit = { method, credentials: 'same-origin', signal, headers: {} }
  if (method !== 'GET') {
    init.headers = { 'content-type': 'application/json' }
    init.body = JSON.stringify(body ?? {})
  }
  const response = await fetch(path, init)
  if (!response.ok) {
    const error = envelopeOf(await response.text())
    if (response.status === 401) for (const listener of signedOutListeners) listener()
    throw new ApiError(response.status, error?.type ?? 'http_error', error?.message ?? `HTTP ${response.status}`, error?.param ?? null, error?.code ?? null)
  }
  return response
}

interface Envelope { message?: string, type?: string, param?: string | null, code?: string | null }

/** The `error` of our envelope, or null for another body (a proxy's page): then the status speaks. */
function envelopeOf (text: string): Envelope | null {
  try {
    return (JSON.parse(text) as { error?: Envelope }).error ?? null
  } catch (err) {
    if (err instanceof SyntaxError) return null
    throw err
  }
}

export async function get<T> (path: string, signal?: AbortSignal): Promise<T> {
  return await (await call('GET', path, undefined, signal)).json() as T
}

export async function post<T> (path: string, body?: unknown): Promise<T> {
  return await (await call('POST', path, body)).json() as T
}

export async function patch<T> (path: string, body: unknown): Promise<T> {
  return await (await call('PATCH', path, body)).json() as T
}

/** One server-sent event as it came off the wire. */
export interface SseMessage { event: string, data: string }

/** Reads a `text/event-stream` body into its events (comments are skipped). */
export async function * readSse (response: Response): AsyncGenerator<SseMessage> {
  if (response.body == null) return
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader()
  let buffer = ''
  for (;;) {
    const { value, done } = await reader.read()
    if (done) return
    buffer += value
    let end = buffer.indexOf('\n\n')
    while (end !== -1) {
      const block = buffer.slice(0, end)
      buffer = buffer.slice(end + 2)
      let event = 'message'
      const data: string[] = []
      for (const line of block.split('\n')) {
        if (line.startsWith('event:')) event = line.slice(6).trim()
        else if (line.startsWith('data:')) data.push(line.slice(5).replace(/^ /, ''))
      }
      if (data.length > 0) yield { event, data: data.join('\n') }
      end = buffer.indexOf('\n\n')
    }
  }
}
