// Answers a routed generation as OpenAI streams it (server-sent events ending in `data: [DONE]`), for chat and
// text completions alike: one place decides when the 200 is committed, what X-Served-By says, how waiting is kept
// alive, how backpressure and a client leaving are handled, and how a failure mid-stream is told.
import type { FastifyReply } from 'fastify'
import type { RoutedGeneration } from '../inference/index.ts'
import { ClientClosedError, toEnvelope, type ErrorEnvelope } from './errors.ts'
import { keepAlive, SseStream, startSse, StreamCutError } from './sse.ts'

/**
 * How long a streaming request may wait for its first event before we commit to a 200 stream. Failures that come
 * at once (queue full, unknown model, a bad parameter, no credits for a peer) still get their own status; a request
 * that waits (for a slot, a model being swapped in, a peer starting) gets its headers and keep-alive comments
 * instead of a silent socket.
 */
export const COMMIT_AFTER_MS = 250

/** An SSE event with a name (`event: <name>`), as Anthropic's and the Responses API's streams send every event. */
export class NamedEvent {
  readonly event: string
  readonly data: unknown
  constructor (event: string, data: unknown) {
    this.event = event
    this.data = data
  }
}

/** How a wire dialect ends its stream, and tells a failure in it. Default: OpenAI's chat stream. */
export interface StreamDialect {
  /** The last line after the last event (OpenAI's `data: [DONE]`); null for none. */
  done: string | null
  /** The event a failure after the headers becomes, from our error envelope. */
  failure: (envelope: ErrorEnvelope) => unknown
}

const OPENAI_STREAM: StreamDialect = { done: 'data: [DONE]\n\n', failure: (envelope) => envelope }

export interface StreamOptions<E> {
  /** Aborted when the client leaves (`clientGone`); the generation was started with it. */
  signal: AbortSignal
  /** Data events sent as soon as the stream opens (the chat's role chunk). */
  opening?: unknown[]
  /** The data events (or NamedEvents) one generation event becomes (none for some). */
  render: (event: E) => unknown[]
  /** Default: OpenAI's chat stream (`data: [DONE]`, the error envelope as a data event). */
  dialect?: StreamDialect
}

/**
 * Streams `generation` to the client. Returns true when the answer went out in full; false when the client left
 * (logged once, at info) or the generation failed mid-stream (an OpenAI-shaped error event, then [DONE]).
 *
 * X-Served-By names where the request is placed when the stream opens. A request placed on a peer may fail over to
 * another peer before its first token; the stream then says so with a `: served-by peer:<nodeID>` comment before
 * that token, so the node that answered is always the last one named.
 */
export async function streamGeneration<E> (reply: FastifyReply, generation: RoutedGeneration<E>, options: StreamOptions<E>): Promise<boolean> {
  const { signal } = options
  const first = generation.events.next()
  const settled = await Promise.race([
    first.then(() => true, () => true),
    new Promise<false>((resolve) => setTimeout(resolve, COMMIT_AFTER_MS, false).unref())
  ])
  if (settled) {
    // An immediate failure goes to the error handler, before any byte is sent, and keeps its status.
    await first.catch((err: unknown) => { throw signal.aborted ? signal.reason : err })
  }
  const announced = generation.servedBy
  const dialect = options.dialect ?? OPENAI_STREAM
  let out: SseStream | null = null
  let stopKeepAlive = (): void => {}
  const send = (data: unknown): void => { if (data instanceof NamedEvent) out?.data(data.data, data.event); else out?.data(data) }
  let finished = false
  try {
    // Inside the try: whatever fails in opening the stream still stops the generation (finally) and answers the client
    const raw = startSse(reply, { 'x-served-by': announced })
    out = new SseStream(raw) // one socket write per event-loop turn, not one per token
    out.comment('stream opened')
    stopKeepAlive = keepAlive(raw)
    for (const data of options.opening ?? []) send(data)
    let next = await first
    if (generation.servedBy !== announced) out.comment(`served-by ${generation.servedBy}`)
    for (; next.done !== true; next = await generation.events.next()) {
      for (const data of options.render(next.value)) send(data)
      // Backpressure: while the socket is full, stop pulling; the engine's queue (bounded by max_tokens) holds the rest.
      await out.drained()
    }
    out.end(dialect.done ?? '')
    finished = true
    return true
  } catch (err) {
    // The stream never opened: the error handler answers (startSse checks the headers before it hijacks the reply); a
    // reply hijacked all the same has nobody left to answer it, so its connection is closed rather than left hanging
    if (out == null) {
      if (!reply.sent) throw err
      reply.raw.destroy()
      toEnvelope(err, reply.request.id, reply.log)
      return false
    }
    const reason: unknown = signal.aborted ? signal.reason : err
    if (reason instanceof StreamCutError) return false // the node ended the stream and told the client why
    if (reason instanceof ClientClosedError) {
      // Nobody is listening, and the generation stopped with the client: an outcome, logged once.
      toEnvelope(reason, reply.request.id, reply.log)
      return false
    }
    // Mid-stream failure: the dialect's error event, then its end, so SDKs surface it instead of hanging.
    send(dialect.failure(toEnvelope(err, reply.request.id, reply.log).body))
    out.end(dialect.done ?? '')
    return false
  } finally {
    stopKeepAlive()
    // A stream that never opened answers at once: the generation stops at its next event (an async generator's return
    // waits behind its pending next, which may be the whole prompt's evaluation), not before the client is answered
    if (!finished && out == null) void Promise.resolve(generation.events.return?.()).catch(() => {})
    else if (!finished) await generation.events.return?.()
  }
}

/**
 * Reads a whole generation for a non-streaming answer. A client that left meanwhile gets ClientClosedError (the
 * error handler logs it once and sends nothing), whatever the generation failed with as it stopped.
 */
export async function collectGeneration<E> (generation: RoutedGeneration<E>, signal: AbortSignal): Promise<E[]> {
  const events: E[] = []
  try {
    for (let next = await generation.events.next(); next.done !== true; next = await generation.events.next()) events.push(next.value)
  } catch (err) {
    throw signal.aborted ? signal.reason : err
  }
  return events
}

/**
 * A non-streamed answer's events, for a route of any dialect: once all are in, `served` marks the model used and
 * X-Served-By says where it ran.
 */
export async function collectAnswer<E> (generation: RoutedGeneration<E>, signal: AbortSignal, reply: FastifyReply, served: () => void): Promise<E[]> {
  const events = await collectGeneration(generation, signal)
  served()
  void reply.header('x-served-by', generation.servedBy)
  return events
}
