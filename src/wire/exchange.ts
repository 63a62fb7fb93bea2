import type { Stream } from '@libp2p/interface'
import type { z } from 'zod'
import { NotFoundError, UnavailableError, errorText } from '../errors.ts'
import { ProtocolError, isHostile } from './errors.ts'
import { openFrames, readMessage, writeMessage, type FrameStream } from './frames.ts'

// Every exchange between two nodes has one shape: the asking side opens a stream, writes one request frame and
// half-closes (the request is complete; that is not a cancel), then reads the answer, one frame or a sequence that
// ends with an explicit last frame; the serving side reads the request with a deadline and answers. Any failure
// resets the stream, which cancels the work at the other end. These helpers are that shape, once.

/** How a domain reaches a peer: the peer network opens a stream by nodeID and hears about misbehaving peers. */
export interface PeerStreams {
  /**
   * Opens `protocol` (or the first of several, in order of preference, the peer serves: the stream's `protocol` says
   * which). Throws NotFoundError for a node that is not a peer, UnavailableError when it cannot be reached.
   */
  open (nodeID: string, protocol: string | string[], options?: { signal?: AbortSignal }): Promise<Stream>
  /** Disconnects and bans a peer whose answer was malformed, oversized or forged (other errors are ignored). */
  reportMisbehaviour? (nodeID: string, err: unknown): Promise<void>
}

/** Deadline for reaching a peer and opening a stream, unless a caller says otherwise. */
export const DEFAULT_OPEN_TIMEOUT_MS = 10_000

export interface OpenOptions {
  /** Cancels; its reason is thrown as is (a cancel is not the peer's failure). */
  signal?: AbortSignal
  /** @default DEFAULT_OPEN_TIMEOUT_MS */
  openTimeoutMs?: number
}

/**
 * Opens `protocol` to `nodeID` within a deadline. Throws the caller's abort reason, NotFoundError for a node that is
 * not a peer, and UnavailableError naming the peer for anything else (a 503 at the HTTP edge: the peer is unreachable).
 */
export async function openPeerStream (peers: PeerStreams, nodeID: string, protocol: string | string[], options: OpenOptions = {}): Promise<Stream> {
  const timeoutMs = options.openTimeoutMs ?? DEFAULT_OPEN_TIMEOUT_MS
  const deadline = AbortSignal.timeout(timeoutMs)
  try {
    return await peers.open(nodeID, protocol, { signal: options.signal == null ? deadline : AbortSignal.any([deadline, options.signal]) })
  } catch (err) {
    if (options.signal?.aborted === true) throw options.signal.reason
    if (err instanceof NotFoundError || err instanceof UnavailableError) throw err
    const why = deadline.aborted ? `no stream within ${timeoutMs} ms` : errorText(err)
    throw new UnavailableError(`Peer ${nodeID} is unreachable: ${why}`, { cause: err })
  }
}

export interface AnswerOptions {
  signal?: AbortSignal
  /** Largest request frame this side writes. */
  maxRequestBytes: number
  /** Largest answer frame accepted; a longer one is refused before its body is buffered. */
  maxAnswerBytes: number
  /** Deadline of each answer frame (the first, and each next one); null waits as long as `signal` allows. */
  timeoutMs: number | null
}

/**
 * The asking side on an open stream: writes `request`, half-closes and yields every answer frame, checked against
 * `schema`, until `isLast` says one was the last. Leaving early, a failure, or a stream that ends without a last frame
 * (a relay cutting a connection looks exactly like an orderly end) resets the stream. Throws ProtocolError for a
 * broken answer and the stream's own error for a reset.
 */
export async function * askOnStream<S extends z.ZodType> (stream: Stream, request: unknown, schema: S, isLast: (frame: z.output<S>) => boolean, options: AnswerOptions): AsyncGenerator<z.output<S>, void, undefined> {
  const frames = openFrames(stream, { maxFrameBytes: options.maxAnswerBytes })
  let finished = false
  try {
    await writeMessage(frames, request, { signal: options.signal, maxFrameBytes: options.maxRequestBytes })
    await stream.close({ signal: options.signal })
    for (;;) {
      const frame = await readMessage(frames, schema, { timeoutMs: options.timeoutMs, signal: options.signal })
      if (isLast(frame)) {
        finished = true
        yield frame
        return
      }
      yield frame
    }
  } finally {
    if (!finished) stream.abort(new ProtocolError('The asking side stopped reading the answer', 'refused'))
  }
}

/** One request, one answer, on an open stream. */
export async function requestOnStream<S extends z.ZodType> (stream: Stream, request: unknown, schema: S, options: AnswerOptions): Promise<z.output<S>> {
  for await (const answer of askOnStream(stream, request, schema, () => true, options)) return answer
  throw new ProtocolError('Stream ended without an answer', 'eof')
}

export interface AskOptions extends AnswerOptions, Pick<OpenOptions, 'openTimeoutMs'> {}

/**
 * Opens `protocol` to a peer and yields its answer frames (see `askOnStream`). A malformed, oversized or forged answer
 * is reported to the network (the peer is disconnected and banned) before the ProtocolError is thrown.
 */
export async function * askPeer<S extends z.ZodType> (peers: PeerStreams, nodeID: string, protocol: string | string[], request: unknown, schema: S, isLast: (frame: z.output<S>) => boolean, options: AskOptions): AsyncGenerator<z.output<S>, void, undefined> {
  const stream = await openPeerStream(peers, nodeID, protocol, options)
  try {
    yield * askOnStream(stream, request, schema, isLast, options)
  } catch (err) {
    if (options.signal?.aborted !== true && isHostile(err)) await peers.reportMisbehaviour?.(nodeID, err)
    throw err
  }
}

/** One request, one answer, with a peer by nodeID. */
export async function requestPeer<S extends z.ZodType> (peers: PeerStreams, nodeID: string, protocol: string, request: unknown, schema: S, options: AskOptions): Promise<z.output<S>> {
  for await (const answer of askPeer(peers, nodeID, protocol, request, schema, () => true, options)) return answer
  throw new ProtocolError('Stream ended without an answer', 'eof')
}

export interface ServeOptions {
  /** Largest request frame accepted. */
  maxRequestBytes: number
  /** Largest answer frame written. @default maxRequestBytes */
  maxAnswerBytes?: number
  /** Deadline of the request frame. */
  timeoutMs: number
  /** Deadline for each answer frame to leave (a requester that stops reading is reset). @default DEFAULT_WRITE_TIMEOUT_MS */
  writeTimeoutMs?: number
}

/**
 * The serving side of one request and one answer: reads the request with a deadline, lets `answer` decide, writes the
 * answer with a deadline too and closes. A broken request throws ProtocolError, and so does an answer the requester
 * does not take (`timeout`: the stream is reset); the caller (the network's guard) resets the stream and holds the
 * sender to account.
 */
export async function serveRequest<S extends z.ZodType> (stream: Stream, schema: S, answer: (request: z.output<S>) => unknown, options: ServeOptions): Promise<void> {
  const frames = openFrames(stream, { maxFrameBytes: options.maxRequestBytes })
  const request = await readMessage(frames, schema, { timeoutMs: options.timeoutMs })
  await writeMessage(frames, await answer(request), { maxFrameBytes: options.maxAnswerBytes, timeoutMs: options.writeTimeoutMs })
  await stream.close()
}

/** The serving side of a longer exchange: reads the request with a deadline and hands its frames on for the answer. */
export async function readRequest<S extends z.ZodType> (stream: Stream, schema: S, options: ServeOptions): Promise<{ frames: FrameStream, request: z.output<S> }> {
  const frames = openFrames(stream, { maxFrameBytes: options.maxRequestBytes })
  return { frames, request: await readMessage(frames, schema, { timeoutMs: options.timeoutMs }) }
}
