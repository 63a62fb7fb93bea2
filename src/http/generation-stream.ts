// Answers a routed generation as OpenAI streams it (server-sent events ending in `data: [DONE]`), for chat and
// text completions alike: one place decides when the 200 is committed, what X-Served-By says, how waiting is kept
// alive, how backpressure and a client leaving are handled, and how a failure mid-stream is told.
import type { FastifyReply } from 'fastify'
import type { RoutedGeneration } from '../inference/index.ts'
import { ClientClosedError, toEnvelope } from './errors.ts'
import { keepAlive, SseStream, startSse, StreamCutError } from './sse.ts'

/**
 * How long a streaming request may wait for its first event before we commit to a 200 stream. Failures that come
 * at once (queue full, unknown model, a bad parameter, no credits for a peer) still get their own status; a request
 * that waits (for a slot, a model being swapped in, a peer starting) gets its headers and keep-alive comments
 * instead of a silent socket.
 */
export const COMMIT_AFTER_MS = 250

export interface StreamOptions<E> {
  /** Aborted when the client leaves (`clientGone`); the generation was started with it. */
  signal: AbortSignal
  /** Data events sent as soon as the stream opens (the chat's role chunk). */
  opening?: unknown[]
  /** The data events one generation event becomes (none for some). */
  render: (event: E) => unknown[]
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
  const raw = startSse(reply, { 'x-served-by': announced })
  const out = new SseStream(raw) // one socket write per event-loop turn, not one per token
  out.comment('stream opened')
  const stopKeepAlive = keepAlive(raw)
  let finished = false
  try {
    for (const data of options.opening ?? []) out.data(data)
    let next = await first
    if (generation.servedBy !== announced) out.comment(`served-by ${generation.servedBy}`)
    for (; next.done !== true; next = await generation.events.next()) {
      for (const data of options.render(next.value)) out.data(data)
      // Backpressure: while the socket is full, stop pulling; the engine's queue (bounded by max_tokens) holds the rest.
      await out.drained()
    }
    out.end('data: [DONE]\n\n')
    finished = true
    return true
  } catch (err) {
    const reason: unknown = signal.aborted ? signal.reason : err
    if (reason instanceof StreamCutError) return false // the node ended the stream and told the client why
    if (reason instanceof ClientClosedError) {
      // Nobody is listening, and the generation stopped with the client: an outcome, logged once.
      toEnvelope(reason, reply.request.id, reply.log)
      return false
    }
    // Mid-stream failure: an OpenAI-shaped error event, then [DONE], so SDKs surface it instead of hanging.
    out.data(toEnvelope(err, reply.request.id, reply.log).body)
    out.end('data: [DONE]\n\n')
    return false
  } finally {
    stopKeepAlive()
    if (!finished) await generation.events.return?.()
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
