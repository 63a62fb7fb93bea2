// Server-sent events over a hijacked fastify reply: the OpenAI streams and GET /v1/app/events speak it. Writes
// respect backpressure: a stream that can wait (a generation) waits for 'drain'; one that cannot (live events) is
// cut once a client stops reading, so a slow reader never grows the node's memory without bound.
import { validateHeaderName, validateHeaderValue, type ServerResponse } from 'node:http'
import type { FastifyReply } from 'fastify'
import { ClientClosedError, requestIDHeaders } from './errors.ts'

export const SSE_HEADERS = {
  'content-type': 'text/event-stream; charset=utf-8',
  'cache-control': 'no-cache, no-transform',
  connection: 'keep-alive',
  // Proxies such as nginx would otherwise buffer the stream and the client would see tokens in bursts.
  'x-accel-buffering': 'no'
} as const

/** How often a comment line is sent while nothing else is, so proxies and clients do not time the stream out. */
export const SSE_KEEPALIVE_MS = 15_000
/**
 * Most bytes a stream may have queued for a client that does not read (beyond what the kernel holds). A stream that
 * waits for 'drain' stays far below it; a live event stream whose client stops reading is cut when it is reached.
 */
export const MAX_SSE_BUFFERED_BYTES = 1024 * 1024

/** What an SseStream gathers for its next write before a writer that waits on `drained()` is held up. */
const MAX_PENDING_CHARS = 64 * 1024

/** Emitted on a stream's response when the node cuts it (`cutStream`), so the work feeding it stops too. */
const STREAM_CUT = 'meshnode:stream-cut'

/** The node ended a stream itself (its key was revoked, say): the work behind it stops; nothing more is written. */
export class StreamCutError extends Error {
  override name = 'StreamCutError'
  constructor () {
    super('stream ended by the node')
  }
}

/**
 * A signal that fires, with ClientClosedError, when the client goes away before we finished answering. It watches
 * the *response*: fastify 5's `request.signal` also fires once a POST body has been read, and a hijacked reply is
 * ours to manage.
 */
export function clientGone (reply: FastifyReply): AbortSignal {
  const gone = new AbortController()
  reply.raw.on('close', () => { if (!reply.raw.writableEnded) gone.abort(new ClientClosedError()) })
  reply.raw.once(STREAM_CUT, (reason: Error) => { gone.abort(reason) })
  return gone.signal
}

/**
 * Ends a stream from the node's side (its key was revoked, say): the work behind it is aborted as if the client had
 * left, and the client reads `error(sequence)` as a last `event: error`, in the stream's dialect (the SDKs throw it as
 * an APIError). `sequence` is the next `sequence_number` of a stream whose events carry one (the Responses API's).
 * What a generation's stream had queued goes out first, so the numbers follow on.
 */
export function cutStream (raw: ServerResponse, error: (sequence: number) => unknown): void {
  if (raw.writableEnded || raw.destroyed) return
  raw.emit(STREAM_CUT, new StreamCutError())
  const stream = sseStreams.get(raw)
  if (stream == null) {
    writeSseData(raw, error(0), 'error')
    raw.end()
  } else {
    stream.end(sseEvent(error(stream.nextSequence), 'error'))
  }
}

/** The SseStream writing each response, for `cutStream`. */
const sseStreams = new WeakMap<ServerResponse, SseStream>()

/**
 * Starts an SSE answer on a hijacked reply, with extra headers (e.g. X-Served-By) merged in. A header Node would refuse
 * to write throws before the reply is hijacked, so the error handler can still answer.
 */
export function startSse (reply: FastifyReply, headers: Record<string, string> = {}): ServerResponse {
  // Headers fastify already queued (CORS, X-Served-By) would be lost by hijacking: carry them over. The request id
  // too, which fastify's onSend hook adds to every other answer but never sees on a hijacked one.
  const all: Record<string, string | string[]> = {}
  for (const [name, value] of Object.entries(reply.getHeaders())) {
    if (value !== undefined) all[name] = typeof value === 'number' ? String(value) : value
  }
  Object.assign(all, requestIDHeaders(reply.request), SSE_HEADERS, headers)
  for (const [name, value] of Object.entries(all)) {
    validateHeaderName(name)
    for (const one of Array.isArray(value) ? value : [value]) validateHeaderValue(name, one)
  }
  reply.hijack()
  const raw = reply.raw
  for (const [name, value] of Object.entries(all)) raw.setHeader(name, value)
  raw.writeHead(200)
  raw.flushHeaders()
  // HEAD is GET without the body: the headers say what the stream would be, and it ends there rather than stay open
  if (reply.request.method === 'HEAD') raw.end()
  else reply.server.openStreams.add(reply.request, raw)
  return raw
}

/**
 * Writes one `data:` event (optionally named) without waiting: for live events that must not hold up their
 * emitter. A client that has let MAX_SSE_BUFFERED_BYTES pile up is not reading; its stream is destroyed (it
 * reconnects and re-reads the state) and false returned. JSON.stringify escapes newlines, so one line suffices.
 */
export function writeSseData (raw: ServerResponse, data: unknown, event?: string): boolean {
  if (raw.writableEnded || raw.destroyed) return false
  if (buffered(raw) > MAX_SSE_BUFFERED_BYTES) {
    raw.destroy(new ClientClosedError('the client stopped reading the event stream'))
    return false
  }
  return raw.write(sseEvent(data, event))
}

/**
 * Events to one SSE client, written in as few socket writes as the event loop allows: what is sent during one turn
 * goes out in one write at the next (setImmediate). For a token stream this is the difference between a system call
 * on the path from one decode to the next and one made while llama.cpp computes the next token (the engine queues
 * its next decode within the same turn it hands out a token). While the socket is full (`write` said no), a writer
 * that can wait awaits `drained()`: a generation's events then wait in the engine's bounded queue, not here.
 */
export class SseStream {
  readonly #raw: ServerResponse
  #pending = ''
  #scheduled = false
  #full = false
  #nextSequence = 0

  constructor (raw: ServerResponse) {
    this.#raw = raw
    sseStreams.set(raw, this)
    raw.on('drain', () => {
      this.#full = false
      this.#flush()
    })
  }

  /** The `sequence_number` after the last one an event carried (the Responses API numbers its events from 0). */
  get nextSequence (): number {
    return this.#nextSequence
  }

  /** One `data:` event (optionally named). */
  data (data: unknown, event?: string): void {
    const sequence = (data as { sequence_number?: unknown } | null)?.sequence_number
    if (typeof sequence === 'number') this.#nextSequence = sequence + 1
    this.#queue(sseEvent(data, event))
  }

  comment (text: string): void {
    this.#queue(`: ${text}\n\n`)
  }

  /**
   * Resolves at once while the socket takes more and little is pending; else writes what is pending and waits until
   * the socket has drained. ClientClosedError once the client has left.
   */
  async drained (): Promise<void> {
    for (;;) {
      if (this.#raw.writableEnded || this.#raw.destroyed) throw new ClientClosedError()
      if (this.#full) {
        await drained(this.#raw)
        continue
      }
      if (this.#pending.length < MAX_PENDING_CHARS) return
      this.#flush() // a turn's events are piling up: write them now, and wait if the socket is full
    }
  }

  /** Writes what is pending and `last`, and ends the response. */
  end (last = ''): void {
    if (this.#raw.writableEnded || this.#raw.destroyed) return
    const text = this.#pending + last
    this.#pending = ''
    this.#raw.end(text)
  }

  #queue (event: string): void {
    this.#pending += event
    if (this.#scheduled || this.#full) return
    this.#scheduled = true
    setImmediate(() => {
      this.#scheduled = false
      this.#flush()
    })
  }

  #flush (): void {
    if (this.#pending === '' || this.#full || this.#raw.writableEnded || this.#raw.destroyed) return
    const text = this.#pending
    this.#pending = ''
    this.#full = !this.#raw.write(text)
  }
}

export function writeSseComment (raw: ServerResponse, text = 'keep-alive'): void {
  // A comment is only a sign of life: skipped while the socket is backed up, since data is queued anyway.
  if (!raw.writableEnded && !raw.destroyed && !raw.writableNeedDrain) raw.write(`: ${text}\n\n`)
}

/** Sends a keep-alive comment every `SSE_KEEPALIVE_MS` until the returned function is called. */
export function keepAlive (raw: ServerResponse, everyMs = SSE_KEEPALIVE_MS): () => void {
  const timer = setInterval(() => { writeSseComment(raw) }, everyMs)
  timer.unref()
  raw.once('close', () => { clearInterval(timer) })
  return () => { clearInterval(timer) }
}

function sseEvent (data: unknown, event: string | undefined): string {
  return `${event == null ? '' : `event: ${event}\n`}data: ${typeof data === 'string' ? data : JSON.stringify(data)}\n\n`
}

/** Bytes queued in Node for this response, in the response and in its socket. */
function buffered (raw: ServerResponse): number {
  return raw.writableLength + (raw.socket?.writableLength ?? 0)
}

async function drained (raw: ServerResponse): Promise<void> {
  await new Promise<void>((resolve, reject) => {
    const done = (): void => {
      raw.off('drain', onDrain)
      raw.off('close', onClose)
    }
    const onDrain = (): void => { done(); resolve() }
    const onClose = (): void => { done(); reject(new ClientClosedError()) }
    raw.on('drain', onDrain)
    raw.on('close', onClose)
  })
}
