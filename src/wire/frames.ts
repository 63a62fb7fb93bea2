import type { Stream, StreamCloseEvent } from '@libp2p/interface'
// libp2p v3 streams are event-based message streams (`send`, 'message' events), no longer it-stream-types duplexes
// with `sink`/`source`. it-length-prefixed-stream 3.x still calls `duplex.sink()` and fails on them, so we use the
// v3-native lpStream of @libp2p/utils, which libp2p's own protocols (identify, relay) use.
import { createRequire } from 'node:module'
import type { LengthPrefixedStream, lpStream as LpStream } from '@libp2p/utils'
import type { z } from 'zod'
import { ProtocolError } from './errors.ts'
import { jsonDepthExceeds, MAX_MESSAGE_DEPTH } from './json-depth.ts'

// @libp2p/utils is loaded at the first framed stream, not with this module: every node imports the wire layer, and the
// package (its weight: bench/README.md) is only needed once a libp2p stream exists, by which time the libp2p host has
// loaded it (require of an ES module, Node 22.12+, returns the same instance).
const require = createRequire(import.meta.url)
let lpStream: typeof LpStream | undefined

/** Default largest frame: a long prompt fits, a memory attack does not. Protocols pick their own. */
export const DEFAULT_MAX_FRAME_BYTES = 256 * 1024
/** Default deadline for one frame to arrive. */
export const DEFAULT_READ_TIMEOUT_MS = 10_000
/**
 * Default deadline for one frame to leave: a peer that stops reading closes its flow-control window, and without a
 * deadline our write would wait for it forever, holding the stream, its buffers and the work behind it (a generation
 * and its admission). A peer that reads at all takes a frame far sooner.
 */
export const DEFAULT_WRITE_TIMEOUT_MS = 30_000
// @libp2p/utils buffers what the peer sends until we read it and aborts the stream past this size (its default is
// 4 MiB); it must hold at least one whole frame, plus what a fast sender pushes while we handle the previous one.
const MIN_READ_BUFFER_BYTES = 4 * 1024 * 1024

/** One stream, framed: every message is a varint length prefix and that many bytes of UTF-8 JSON. */
export interface FrameStream {
  readonly stream: Stream
  /** Largest frame read or written on this stream. */
  readonly maxFrameBytes: number
  readonly lp: LengthPrefixedStream<Stream>
}

export interface FrameStreamOptions {
  /** Largest frame accepted; a longer length prefix is refused before its body is buffered. @default 256 KiB */
  maxFrameBytes?: number
}

export function openFrames (stream: Stream, options: FrameStreamOptions = {}): FrameStream {
  const maxFrameBytes = options.maxFrameBytes ?? DEFAULT_MAX_FRAME_BYTES
  lpStream ??= (require('@libp2p/utils') as { lpStream: typeof LpStream }).lpStream
  const lp = lpStream(stream, { maxDataLength: maxFrameBytes, maxBufferSize: Math.max(MIN_READ_BUFFER_BYTES, 2 * maxFrameBytes + 16) })
  return { stream, maxFrameBytes, lp }
}

export interface ReadMessageOptions {
  /** Deadline for this frame to arrive; null waits for as long as `signal` allows. @default 10_000 */
  timeoutMs?: number | null
  /** Cancels the read; its reason is thrown as is (a cancel is not a protocol error). */
  signal?: AbortSignal
}

const utf8 = new TextDecoder('utf-8', { fatal: true })
const utf8Encoder = new TextEncoder()

/**
 * Reads one frame and returns it parsed and checked against `schema`. Throws `ProtocolError` for an oversized,
 * malformed (too deeply nested too), invalid, late or missing frame; after any throw the stream's framing is undefined, so abort it.
 * A reset by the peer is rethrown as libp2p reports it.
 */
export async function readMessage<S extends z.ZodType> (frames: FrameStream, schema: S, options: ReadMessageOptions = {}): Promise<z.output<S>> {
  const timeoutMs = options.timeoutMs === undefined ? DEFAULT_READ_TIMEOUT_MS : options.timeoutMs
  const deadline = timeoutMs == null ? null : AbortSignal.timeout(timeoutMs)
  const signals = [deadline, options.signal].filter((s): s is AbortSignal => s != null)
  let bytes: Uint8Array
  try {
    bytes = (await frames.lp.read({ signal: signals.length > 0 ? AbortSignal.any(signals) : undefined })).subarray()
  } catch (err) {
    if (options.signal?.aborted === true) throw options.signal.reason
    if (deadline?.aborted === true) throw new ProtocolError(`No frame within ${timeoutMs} ms`, 'timeout', { cause: err })
    throw fromFramingError(err, frames.maxFrameBytes)
  }
  let value: unknown
  try {
    value = JSON.parse(utf8.decode(bytes))
  } catch (err) {
    // The expected failures here: invalid UTF-8 (TypeError from the fatal decoder) or invalid JSON (SyntaxError).
    throw new ProtocolError(`Frame is not UTF-8 JSON (${bytes.byteLength} bytes)`, 'malformed', { cause: err })
  }
  // Before any schema or recursive walk sees it: they would overflow the stack on it
  if (jsonDepthExceeds(value, MAX_MESSAGE_DEPTH)) throw new ProtocolError(`Frame nests deeper than ${MAX_MESSAGE_DEPTH} levels`, 'malformed')
  return parseWith(schema, value, 'Frame')
}

export interface WriteMessageOptions {
  /** Cancels the write; its reason is thrown as is. */
  signal?: AbortSignal
  /** Refuse to send a frame above this size; the peer would refuse it anyway. @default frames.maxFrameBytes */
  maxFrameBytes?: number
  /** Deadline for the frame to leave the stream's buffer; null waits as long as `signal` allows. @default DEFAULT_WRITE_TIMEOUT_MS */
  timeoutMs?: number | null
}

/**
 * Writes one JSON frame, waiting while the stream applies backpressure until all of it has left the stream's buffer, so
 * that a `close()` after it has nothing left to wait for. A frame not gone within the deadline resets the stream (the
 * peer stopped reading; the stream's 'close' cancels whatever waits on it) and throws `ProtocolError` `timeout`.
 */
export async function writeMessage (frames: FrameStream, value: unknown, options: WriteMessageOptions = {}): Promise<void> {
  const bytes = utf8Encoder.encode(JSON.stringify(value))
  const max = options.maxFrameBytes ?? frames.maxFrameBytes
  if (bytes.byteLength > max) throw new ProtocolError(`Frame of ${bytes.byteLength} bytes exceeds the limit of ${max}`, 'too_large')
  const timeoutMs = options.timeoutMs === undefined ? DEFAULT_WRITE_TIMEOUT_MS : options.timeoutMs
  const caller = options.signal
  caller?.throwIfAborted()
  // One controller, a timer cleared when the write is done and a listener removed then: a frame a token (a stream
  // writes thousands) leaves nothing behind, where a timeout signal combined with the caller's would live its 30 s.
  const write = new AbortController()
  let late = false
  const timer = timeoutMs == null ? null : setTimeout(() => { late = true; write.abort(new Error('write deadline')) }, timeoutMs)
  timer?.unref() // a write waiting on a peer keeps no process alive
  const onAbort = (): void => { write.abort(caller?.reason) }
  caller?.addEventListener('abort', onAbort, { once: true })
  try {
    await frames.lp.write(bytes, { signal: write.signal })
    await sent(frames.stream, write.signal)
  } catch (err) {
    if (caller?.aborted === true) throw caller.reason
    if (!late) throw err
    const timeout = new ProtocolError(`The peer took no frame within ${timeoutMs} ms`, 'timeout', { cause: err })
    frames.stream.abort(timeout)
    throw timeout
  } finally {
    if (timer != null) clearTimeout(timer)
    caller?.removeEventListener('abort', onAbort)
  }
}

/**
 * Resolves once `stream` holds nothing unsent and can take more. The frame writer waits for one 'drain' only; what is
 * left after it goes out with later window updates, and a `close()` would wait for those without a deadline.
 */
async function sent (stream: Stream, signal: AbortSignal | undefined): Promise<void> {
  while (stream.writeBufferLength > 0 || stream.writableNeedsDrain) {
    if (stream.status !== 'open' && stream.status !== 'closing') throw new Error(`The stream was ${stream.status} before the frame was sent`)
    signal?.throwIfAborted()
    await new Promise<void>((resolve, reject) => {
      const done = (err?: unknown): void => {
        stream.removeEventListener('drain', onProgress)
        stream.removeEventListener('idle', onProgress)
        stream.removeEventListener('close', onClose)
        signal?.removeEventListener('abort', onAbort)
        if (err == null) resolve()
        else reject(err)
      }
      const onProgress = (): void => { done() }
      const onClose = (evt: StreamCloseEvent): void => { done(evt.error ?? new Error('The stream closed before the frame was sent')) }
      const onAbort = (): void => { done(signal?.reason) }
      stream.addEventListener('drain', onProgress)
      stream.addEventListener('idle', onProgress)
      stream.addEventListener('close', onClose)
      signal?.addEventListener('abort', onAbort)
    })
  }
}

function fromFramingError (err: unknown, maxFrameBytes: number): unknown {
  const name = err instanceof Error ? err.name : ''
  // Matched by name: @libp2p/utils may exist in more than one copy, so instanceof is not reliable.
  if (name === 'InvalidDataLengthError' || name === 'InvalidDataLengthLengthError' || name === 'StreamBufferError') {
    return new ProtocolError(`Frame exceeds the limit of ${maxFrameBytes} bytes`, 'too_large', { cause: err })
  }
  if (name === 'InvalidMessageLengthError') return new ProtocolError('Invalid frame length prefix', 'malformed', { cause: err })
  if (name === 'UnexpectedEOFError') return new ProtocolError('Stream ended before a complete frame', 'eof', { cause: err })
  return err
}

/** `schema`'s output for `value`, or ProtocolError `invalid` naming the first issue. */
export function parseWith<S extends z.ZodType> (schema: S, value: unknown, what: string): z.output<S> {
  const result = schema.safeParse(value)
  if (result.success) return result.data
  const issue = result.error.issues[0]
  const where = issue == null || issue.path.length === 0 ? '' : ` at ${issue.path.join('.')}`
  throw new ProtocolError(`${what} does not match its schema${where}: ${issue?.message ?? 'invalid'}`, 'invalid', { cause: result.error })
}

/**
 * The promise's value, or `'timeout'` when it has not settled within `ms`: how a streaming handler notices a quiet
 * spell and sends a keep-alive frame while it keeps waiting for the same promise.
 */
export async function firstOrTimeout<T> (promise: Promise<T>, ms: number): Promise<T | 'timeout'> {
  let timer: NodeJS.Timeout | undefined
  const timeout = new Promise<'timeout'>((resolve) => { timer = setTimeout(resolve, ms, 'timeout') })
  try {
    return await Promise.race([promise, timeout])
  } finally {
    clearTimeout(timer)
  }
}
