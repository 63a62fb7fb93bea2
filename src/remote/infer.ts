import type { Stream } from '@libp2p/interface'
import type { Logger } from 'pino'
import { BusyError, InvalidInputError, UnavailableError } from '../errors.ts'
import { ContextOverflowError, type InferenceEvent, type InferenceRequest } from '../inference/index.ts'
import type { PeerGeneration } from '../serving/index.ts'
import {
  DEFAULT_WRITE_TIMEOUT_MS, ProtocolError, askPeer, batchesWithKeepAlives, isHostile, readRequest, writeMessage, type FrameStream, type PeerStreams
} from '../wire/index.ts'
import {
  AnswerCheck, INFER_PROTOCOL_REASONING, InferFrame, InferRequest, MAX_INFER_REQUEST_BYTES, MAX_INFER_RESPONSE_FRAME_BYTES, inferProtocols,
  type InferErrorKind
} from './infer-wire.ts'
import type { RemotePeer } from '../network/index.ts'

export {
  INFER_PROTOCOL, INFER_PROTOCOL_CHAT, INFER_PROTOCOL_REASONING, INFER_ERROR_KINDS, InferFrame, InferRequest, MAX_INFER_REQUEST_BYTES, MAX_INFER_RESPONSE_FRAME_BYTES,
  WireChatRequest, WireRequest, BillableTokens, UNSEEN_ANSWER_TOKENS, UNSEEN_INPUT_TOKENS, UNSEEN_TOOL_CALL_TOKENS, inferProtocols
} from './infer-wire.ts'
export type { InferErrorKind } from './infer-wire.ts'

// Remote inference: a node asks a peer to run a request (a chat, with tools; a text completion; embeddings) on the
// peer's loaded model. One stream per request: the requester sends one request frame and half-closes; the server
// answers with keep-alive frames while the request waits for a slot, then the answer's frames as they come (text
// deltas, tool calls and their argument fragments, embedding vectors), and always one explicit last frame, `done`
// (with the tokens it really used, which the requester pays for) or `error`. Ending without a last frame is a
// failure: a relay cutting a connection looks exactly like an orderly end of stream. Closing or resetting the stream
// cancels. The messages and their limits are in infer-wire.ts.

export const INFER_REQUEST_TIMEOUT_MS = 10_000
/** The server sends a keep-alive frame when it has sent nothing for this long (waiting for a slot, a long prompt). */
export const INFER_KEEPALIVE_MS = 5_000
/** The requester gives up on a peer that sent no frame for this long. */
export const INFER_IDLE_TIMEOUT_MS = 30_000
/**
 * The requester gives up on an answer not finished this long after it asked, however steadily the peer sends: frames
 * (keep-alives included) restart the idle deadline, never this one. Generous: a slow node's long answer fits.
 */
export const INFER_ANSWER_DEADLINE_MS = 60 * 60_000
/**
 * Most one answer may hold, whatever its request allows: characters of text, thoughts, tool calls and their arguments,
 * each frame counting INFER_ANSWER_FRAME_CHARS more. What a requester holds of an answer (a non-streamed one is
 * collected whole) stays bounded.
 */
export const MAX_INFER_ANSWER_CHARS = 16 * 1024 * 1024
/**
 * Most an answer may hold for each token its request allows (its maxTokens, plus a chat's thoughtTokens), counted as
 * MAX_INFER_ANSWER_CHARS is: far more than any token's text, or than the frames one token can open (a thought's end and
 * the answer's start, a tool call and its arguments).
 */
export const MAX_INFER_ANSWER_CHARS_PER_TOKEN = 1024
/** What each answer frame counts beyond its text against those bounds: a flood of tiny or empty frames is bounded too. */
export const INFER_ANSWER_FRAME_CHARS = 64
/** Requests one peer may have running on us at once, per protocol version (the slot pool and its queue bound the work anyway). */
export const MAX_INBOUND_INFER_STREAMS = 32
/** Most text one delta or arguments frame carries when tokens are coalesced (well under MAX_INFER_RESPONSE_FRAME_BYTES). */
const COALESCE_MAX_CHARS = 8 * 1024

/** The infer request as this node builds it. */
export interface InferAsk {
  modelID: string
  request: InferenceRequest
  ptnID: string | null
  requester?: string | null
}

/** A peer's answer said no, or failed; `kind` decides whether the next peer is tried. */
export class RemoteInferenceError extends Error {
  override name = 'RemoteInferenceError'
  readonly kind: InferErrorKind
  readonly param: string | null
  readonly retryAfterSeconds: number | null
  /** For an `invalid` prompt past the context: its tokens and the most the context takes. */
  readonly overflow: { promptTokens: number, roomTokens: number } | null
  constructor (frame: Extract<InferFrame, { type: 'error' }>) {
    super(frame.message)
    this.kind = frame.kind
    this.param = frame.param
    this.retryAfterSeconds = frame.retryAfterSeconds
    this.overflow = frame.overflow ?? null
  }
}

export interface InferHandlerDeps {
  /** The one door from peers to the engine (src/serving). */
  policy: { generate (ask: PeerGeneration, options: { signal?: AbortSignal }): AsyncIterable<InferenceEvent> }
  log: Logger
}

export interface InferHandlerOptions {
  /** Deadline for each answer frame to leave (the wire's, for every protocol). @default DEFAULT_WRITE_TIMEOUT_MS */
  writeTimeoutMs?: number
}

/**
 * The serving side, for both protocol versions: a peer's request goes through the serving policy (which admits it or
 * refuses it) to the engine, and its events come back as frames: keep-alives while it waits for a slot, text and
 * argument fragments (everything generated while the last frame was written goes out together), tool calls and
 * vectors as they come, then one final `done` or `error`. A malformed, oversized or invalid request throws
 * (ProtocolError): the network resets the stream and bans the peer. A requester that stops reading has its stream
 * reset when a frame does not leave within the write deadline, which cancels the generation and ends its admission.
 */
export function createInferHandler (deps: InferHandlerDeps, options: InferHandlerOptions = {}): (stream: Stream, peer: RemotePeer) => Promise<void> {
  const writeTimeoutMs = options.writeTimeoutMs ?? DEFAULT_WRITE_TIMEOUT_MS
  return async (stream, peer) => {
    const { frames, request: ask } = await readRequest(stream, InferRequest, { maxRequestBytes: MAX_INFER_REQUEST_BYTES, timeoutMs: INFER_REQUEST_TIMEOUT_MS })
    const peerGone = new AbortController()
    stream.addEventListener('close', () => { peerGone.abort(new Error('The requesting peer closed the stream')) }, { once: true })
    const signal = peerGone.signal
    const reasoning = stream.protocol === INFER_PROTOCOL_REASONING
    const events = deps.policy.generate({
      kind: ask.request.kind, nodeID: peer.nodeID, ptnID: ask.ptnID, requesterLabel: ask.requester ?? null, modelID: ask.modelID, request: ask.request as InferenceRequest
    }, { signal })
    const out = new FrameWriter(frames, signal, writeTimeoutMs)
    try {
      const batches = batchesWithKeepAlives(events, { everyMs: INFER_KEEPALIVE_MS, keepAlive: async () => { await out.write({ type: 'keepalive' }) } })
      for await (const batch of batches) {
        for (const event of batch) {
          switch (event.type) {
            case 'delta':
              await out.text('delta', event.text)
              continue
            case 'tool_arguments':
              await out.text(event.index, event.text)
              continue
            case 'reasoning':
              // Older requesters know no thought frames: for them the thought is left out
              if (reasoning) await out.text('reasoning', event.text)
              continue
            case 'done':
              await out.write({ type: 'done', finishReason: event.finishReason, usage: event.usage, ...(event.stopSequence == null ? {} : { stopSequence: event.stopSequence }) })
              await frames.stream.close({ signal })
              return
            default:
              await out.write(event)
          }
        }
        await out.flush()
      }
      throw new Error('generation ended without a final event')
    } catch (err) {
      // The requester left, or stopped reading (the write deadline reset the stream); the generation stopped with it
      if (signal.aborted) return
      const frame = toErrorFrame(err)
      if (frame.kind === 'internal') deps.log.error({ err, peer: peer.nodeID, modelID: ask.modelID }, 'serving a peer request failed')
      await out.write(frame)
      await frames.stream.close({ signal })
    }
  }
}

/**
 * Writes answer frames, coalescing consecutive text of one kind (answer text, or one tool call's arguments) into one
 * frame of at most COALESCE_MAX_CHARS; any other frame first flushes what is pending, so the order is kept.
 */
class FrameWriter {
  readonly #frames: FrameStream
  readonly #signal: AbortSignal
  readonly #timeoutMs: number
  /** What the pending text is: the answer's, the thought's, or a number: that tool call's arguments. */
  #pendingKind: 'delta' | 'reasoning' | number = 'delta'
  #pending = ''

  constructor (frames: FrameStream, signal: AbortSignal, timeoutMs: number) {
    this.#frames = frames
    this.#signal = signal
    this.#timeoutMs = timeoutMs
  }

  async text (kind: 'delta' | 'reasoning' | number, text: string): Promise<void> {
    if (this.#pending !== '' && this.#pendingKind !== kind) await this.flush()
    this.#pendingKind = kind
    this.#pending += text
    if (this.#pending.length >= COALESCE_MAX_CHARS) await this.flush()
  }

  async flush (): Promise<void> {
    if (this.#pending === '') return
    const text = this.#pending
    this.#pending = ''
    const kind = this.#pendingKind
    const frame: InferFrame = typeof kind === 'number' ? { type: 'tool_arguments', index: kind, text } : { type: kind, text }
    await writeMessage(this.#frames, frame, { signal: this.#signal, timeoutMs: this.#timeoutMs })
  }

  async write (frame: InferFrame): Promise<void> {
    await this.flush()
    await writeMessage(this.#frames, frame, { signal: this.#signal, timeoutMs: this.#timeoutMs })
  }
}

function errorFrame (kind: InferErrorKind, message: string, extra: { param?: string | null, retryAfterSeconds?: number | null, overflow?: { promptTokens: number, roomTokens: number } } = {}): Extract<InferFrame, { type: 'error' }> {
  return {
    type: 'error', kind, message: message.slice(0, 2000), param: extra.param ?? null, retryAfterSeconds: extra.retryAfterSeconds ?? null,
    ...(extra.overflow == null ? {} : { overflow: extra.overflow })
  }
}

/** Our error kinds on the wire; anything unexpected goes out as `internal` without its details. */
function toErrorFrame (err: unknown): Extract<InferFrame, { type: 'error' }> {
  if (err instanceof BusyError) return errorFrame('busy', err.message, { retryAfterSeconds: Math.min(3600, Math.max(0, Math.round(err.retryAfterSeconds))) })
  if (err instanceof ContextOverflowError) {
    return errorFrame('invalid', err.message, { param: err.param?.slice(0, 256) ?? null, overflow: { promptTokens: err.promptTokens, roomTokens: err.roomTokens } })
  }
  if (err instanceof InvalidInputError) return errorFrame('invalid', err.message, { param: err.param?.slice(0, 256) ?? null })
  if (err instanceof UnavailableError) return errorFrame('unavailable', err.message)
  return errorFrame('internal', 'The serving node failed to generate the answer')
}

export interface RequestInferenceOptions {
  signal?: AbortSignal
  /** Deadline for reaching the peer and opening the stream. */
  openTimeoutMs?: number
  /** Deadline for the whole answer, from asking to its last frame. @default INFER_ANSWER_DEADLINE_MS */
  answerDeadlineMs?: number
}

/**
 * The requesting side of one attempt: sends the request to `nodeID` and yields the peer's events, on the newest version
 * of `inferProtocols(request)` the peer serves; a peer serving none of them refuses the stream (UnavailableError: the
 * router tries the next peer). Throws `RemoteInferenceError` for the peer's error frame,
 * `ProtocolError` for a broken answer (a missing last frame, frames the request cannot have, or more answer than the
 * request allows: `too_large`; the peer is reported), `ProtocolError` `timeout` for an answer that stopped coming or
 * was not finished within `answerDeadlineMs`, UnavailableError when the peer cannot be reached. Leaving early, or
 * aborting `signal`, resets the stream, which cancels the generation at the peer.
 */
export async function * requestInference (peers: PeerStreams, nodeID: string, ask: InferAsk, options: RequestInferenceOptions = {}): AsyncGenerator<InferenceEvent, void, undefined> {
  const protocol = inferProtocols(ask.request)
  const deadlineMs = options.answerDeadlineMs ?? INFER_ANSWER_DEADLINE_MS
  const late = new ProtocolError(`No complete answer within ${deadlineMs} ms of asking, the most an answer may take`, 'timeout')
  const deadline = new AbortController()
  const timer = setTimeout(() => { deadline.abort(late) }, deadlineMs)
  timer.unref()
  const signal = options.signal == null ? deadline.signal : AbortSignal.any([options.signal, deadline.signal])
  try {
    const frames = askPeer(peers, nodeID, protocol, ask, InferFrame, (frame) => frame.type === 'done' || frame.type === 'error', {
      signal,
      openTimeoutMs: options.openTimeoutMs,
      timeoutMs: INFER_IDLE_TIMEOUT_MS,
      maxRequestBytes: MAX_INFER_REQUEST_BYTES,
      maxAnswerBytes: MAX_INFER_RESPONSE_FRAME_BYTES
    })
    const answer = new AnswerCheck(ask.request)
    const size = new AnswerSize(ask.request)
    for await (const frame of frames) {
      try {
        answer.check(frame)
        size.add(frame)
      } catch (err) {
        if (isHostile(err)) await peers.reportMisbehaviour?.(nodeID, err)
        throw err
      }
      switch (frame.type) {
        case 'keepalive':
          continue
        case 'error':
          throw new RemoteInferenceError(frame)
        case 'done':
          yield frame
          return
        default:
          yield frame
      }
    }
    throw new ProtocolError('The answer ended without a last frame', 'eof')
  } catch (err) {
    // The deadline aborts whatever was waiting (opening, writing, reading) with its own error; the caller's cancel stays theirs.
    if (deadline.signal.aborted && options.signal?.aborted !== true) throw late
    throw err
  } finally {
    clearTimeout(timer)
  }
}

/** How much answer `request` allows (see MAX_INFER_ANSWER_CHARS), and the tokens that bound it (null: no token bound). */
export function inferAnswerLimit (request: InferenceRequest): { chars: number, tokens: number | null } {
  if (request.kind === 'embeddings' || request.maxTokens == null) return { chars: MAX_INFER_ANSWER_CHARS, tokens: null }
  const tokens = request.maxTokens + (request.kind === 'chat' ? request.thoughtTokens ?? 0 : 0)
  return { chars: Math.min(MAX_INFER_ANSWER_CHARS, tokens * MAX_INFER_ANSWER_CHARS_PER_TOKEN), tokens }
}

/**
 * Counts an answer against what its request allows (`inferAnswerLimit`): past it, ProtocolError `too_large`, as for an
 * oversized frame. Keep-alives hold nothing and count nothing (the answer deadline ends them); an embeddings answer
 * is bounded by AnswerCheck (one vector per input).
 */
class AnswerSize {
  readonly #limit: { chars: number, tokens: number | null }
  #chars = 0

  constructor (request: InferenceRequest) {
    this.#limit = inferAnswerLimit(request)
  }

  add (frame: InferFrame): void {
    this.#chars += answerChars(frame)
    if (this.#chars <= this.#limit.chars) return
    const { chars, tokens } = this.#limit
    const bound = tokens == null || chars === MAX_INFER_ANSWER_CHARS ? 'the most any answer may hold' : `what a request for ${tokens} tokens allows`
    throw new ProtocolError(`Answer out of bounds: more than ${chars} characters, ${bound}`, 'too_large')
  }
}

function answerChars (frame: InferFrame): number {
  switch (frame.type) {
    case 'delta':
    case 'reasoning':
    case 'tool_arguments':
      return INFER_ANSWER_FRAME_CHARS + frame.text.length
    case 'tool_call':
      return INFER_ANSWER_FRAME_CHARS + frame.id.length + frame.name.length
    default:
      return 0
  }
}
