import type { Stream } from '@libp2p/interface'
import type { Logger } from 'pino'
import { z } from 'zod'
import { BusyError, InvalidInputError, UnavailableError } from '../errors.ts'
import { MAX_STOP_STRINGS, MAX_STOP_STRING_CHARS, type ChatEvent, type ChatRequest } from '../inference/index.ts'
import { ModelIDString } from './capabilities.ts'
import type { PeerGeneration } from '../serving/index.ts'
import { askPeer, batchesWithKeepAlives, readRequest, writeMessage, type FrameStream, type PeerStreams } from '../wire/index.ts'
import type { RemotePeer } from './protocol-registry.ts'

// Remote inference: a node asks a peer to run a chat request on the peer's loaded model. One stream per request:
// the requester sends one request frame and half-closes; the server answers with keep-alive frames while the request
// waits for a slot, delta frames as tokens come, and always one explicit last frame, `done` (with the tokens it
// really generated, which the requester pays for) or `error`. Ending without a last frame is a failure: a relay
// cutting a connection looks exactly like an orderly end of stream. Closing or resetting the stream cancels.
export const INFER_PROTOCOL = '/meshnode/infer/1.0.0'   // new version on any wire change
/** The HTTP API takes bodies up to 1 MiB; the same messages, re-encoded, fit here. */
export const MAX_INFER_REQUEST_BYTES = 2 * 1024 * 1024
/** One answer frame: a token's text, or an error message. */
export const MAX_INFER_RESPONSE_FRAME_BYTES = 64 * 1024
export const INFER_REQUEST_TIMEOUT_MS = 10_000
/** The server sends a keep-alive frame when it has sent nothing for this long (waiting for a slot, a long prompt). */
export const INFER_KEEPALIVE_MS = 5_000
/** The requester gives up on a peer that sent no frame for this long. */
export const INFER_IDLE_TIMEOUT_MS = 30_000
/** Requests one peer may have running on us at once (the slot pool and its queue bound the work anyway). */
export const MAX_INBOUND_INFER_STREAMS = 32
const MAX_MESSAGES = 4096
/** Most text one delta frame carries when tokens are coalesced (well under MAX_INFER_RESPONSE_FRAME_BYTES). */
const COALESCE_MAX_CHARS = 8 * 1024

const Message = z.object({ role: z.enum(['system', 'user', 'assistant']), content: z.string() })
const ResponseFormat = z.discriminatedUnion('type', [
  z.object({ type: z.literal('text') }),
  z.object({ type: z.literal('json_object') }),
  z.object({ type: z.literal('json_schema'), schema: z.record(z.string(), z.json()) })
])
/** The engine checks ranges against the model it runs; the wire only checks types. */
export const WireChatRequest = z.object({
  messages: z.array(Message).min(1).max(MAX_MESSAGES),
  maxTokens: z.number().int().positive().nullish(),
  temperature: z.number().nullish(),
  topP: z.number().nullish(),
  topK: z.number().int().nullish(),
  stop: z.array(z.string().max(MAX_STOP_STRING_CHARS)).max(MAX_STOP_STRINGS).nullish(),
  seed: z.number().int().nullish(),
  presencePenalty: z.number().nullish(),
  frequencyPenalty: z.number().nullish(),
  responseFormat: ResponseFormat.nullish()
})

export const InferRequest = z.object({
  modelID: ModelIDString,
  request: WireChatRequest,
  /** The PTN the requester runs this for, if any; the server's reservation applies to its members. */
  ptnID: z.string().max(256).nullable(),
  /**
   * An opaque label for whom the requesting node asks (a hash of its API key or owner); the server keeps prompt
   * caches of different labels, as of different peers, apart. Optional, added within 1.0.0 (older nodes drop it).
   */
  requester: z.string().max(64).nullish()
})
export type InferRequest = z.infer<typeof InferRequest>

const Usage = z.object({
  promptTokens: z.number().int().nonnegative(),
  completionTokens: z.number().int().nonnegative(),
  totalTokens: z.number().int().nonnegative(),
  /** Prompt tokens the server reused from this requester's earlier request. Added within 1.0.0: a reader that does
   * not know it drops it (zod strips unknown keys), and one that does reads 0 from a server that does not send it. */
  cachedTokens: z.number().int().nonnegative().default(0)
})

/** Why a server refused or failed a request; the requester maps it back to our error kinds. */
export const INFER_ERROR_KINDS = ['busy', 'unavailable', 'invalid', 'internal'] as const
export type InferErrorKind = typeof INFER_ERROR_KINDS[number]

export const InferFrame = z.discriminatedUnion('type', [
  z.object({ type: z.literal('keepalive') }),
  z.object({ type: z.literal('delta'), text: z.string() }),
  z.object({ type: z.literal('done'), finishReason: z.enum(['stop', 'length']), usage: Usage }),
  z.object({
    type: z.literal('error'),
    kind: z.enum(INFER_ERROR_KINDS),
    message: z.string().max(2000),
    param: z.string().max(256).nullable(),
    retryAfterSeconds: z.number().int().min(0).max(3600).nullable()
  })
])
export type InferFrame = z.infer<typeof InferFrame>

/** A peer's answer said no, or failed; `kind` decides whether the next peer is tried. */
export class RemoteInferenceError extends Error {
  override name = 'RemoteInferenceError'
  readonly kind: InferErrorKind
  readonly param: string | null
  readonly retryAfterSeconds: number | null
  constructor (frame: Extract<InferFrame, { type: 'error' }>) {
    super(frame.message)
    this.kind = frame.kind
    this.param = frame.param
    this.retryAfterSeconds = frame.retryAfterSeconds
  }
}

export interface InferHandlerDeps {
  /** The one door from peers to the engine (src/serving). */
  policy: { generate (ask: PeerGeneration, options: { signal?: AbortSignal }): AsyncIterable<ChatEvent> }
  log: Logger
}

/**
 * The serving side: a peer's request goes through the serving policy (which admits it or refuses it) to the engine,
 * and its events come back as frames: keep-alives while it waits for a slot, deltas (everything generated while the
 * last frame was written goes out together), then one final `done` or `error`. A malformed, oversized or invalid
 * request throws (ProtocolError): the network resets the stream and bans the peer.
 */
export function createInferHandler (deps: InferHandlerDeps): (stream: Stream, peer: RemotePeer) => Promise<void> {
  return async (stream, peer) => {
    const { frames, request: ask } = await readRequest(stream, InferRequest, { maxRequestBytes: MAX_INFER_REQUEST_BYTES, timeoutMs: INFER_REQUEST_TIMEOUT_MS })
    const peerGone = new AbortController()
    stream.addEventListener('close', () => { peerGone.abort(new Error('The requesting peer closed the stream')) }, { once: true })
    const signal = peerGone.signal
    const events = deps.policy.generate({
      kind: 'chat', nodeID: peer.nodeID, ptnID: ask.ptnID, requesterLabel: ask.requester ?? null, modelID: ask.modelID, request: ask.request as ChatRequest
    }, { signal })
    try {
      const batches = batchesWithKeepAlives(events, { everyMs: INFER_KEEPALIVE_MS, keepAlive: async () => { await writeMessage(frames, { type: 'keepalive' }, { signal }) } })
      for await (const batch of batches) {
        let text = ''
        for (const event of batch) {
          if (event.type === 'delta') {
            text += event.text
            if (text.length < COALESCE_MAX_CHARS) continue
            await writeMessage(frames, { type: 'delta', text }, { signal })
            text = ''
            continue
          }
          // The wire request carries no tools, so a chat served for a peer ends in text
          if (event.type !== 'done' || event.finishReason === 'tool_calls') throw new Error(`unexpected ${event.type} event for a peer`)
          if (text !== '') await writeMessage(frames, { type: 'delta', text }, { signal })
          text = ''
          await sendFinal(frames, { type: 'done', finishReason: event.finishReason, usage: event.usage }, signal)
          return
        }
        if (text !== '') await writeMessage(frames, { type: 'delta', text }, { signal })
      }
      throw new Error('generation ended without a final event')
    } catch (err) {
      if (signal.aborted) return   // the requester left; the generation stopped with it
      const frame = toErrorFrame(err)
      if (frame.kind === 'internal') deps.log.error({ err, peer: peer.nodeID, modelID: ask.modelID }, 'serving a peer request failed')
      await sendFinal(frames, frame, signal)
    }
  }
}

async function sendFinal (frames: FrameStream, frame: InferFrame, signal: AbortSignal): Promise<void> {
  await writeMessage(frames, frame, { signal })
  await frames.stream.close({ signal })
}

function errorFrame (kind: InferErrorKind, message: string, extra: { param?: string | null, retryAfterSeconds?: number | null } = {}): Extract<InferFrame, { type: 'error' }> {
  return { type: 'error', kind, message: message.slice(0, 2000), param: extra.param ?? null, retryAfterSeconds: extra.retryAfterSeconds ?? null }
}

/** Our error kinds on the wire; anything unexpected goes out as `internal` without its details. */
function toErrorFrame (err: unknown): Extract<InferFrame, { type: 'error' }> {
  if (err instanceof BusyError) return errorFrame('busy', err.message, { retryAfterSeconds: Math.min(3600, Math.max(0, Math.round(err.retryAfterSeconds))) })
  if (err instanceof InvalidInputError) return errorFrame('invalid', err.message, { param: err.param?.slice(0, 256) ?? null })
  if (err instanceof UnavailableError) return errorFrame('unavailable', err.message)
  return errorFrame('internal', 'The serving node failed to generate the answer')
}

/**
 * The requesting side of one attempt: sends the request to `nodeID` and yields the peer's events. Throws
 * `RemoteInferenceError` for the peer's error frame, `ProtocolError` for a broken answer (a missing last frame too;
 * the peer is reported), UnavailableError when it cannot be reached. Leaving early, or aborting `signal`, resets the
 * stream, which cancels the generation at the peer.
 */
export async function * requestInference (peers: PeerStreams, nodeID: string, ask: InferRequest, options: { signal?: AbortSignal, openTimeoutMs?: number } = {}): AsyncGenerator<ChatEvent, void, undefined> {
  const frames = askPeer(peers, nodeID, INFER_PROTOCOL, ask, InferFrame, (frame) => frame.type === 'done' || frame.type === 'error', {
    signal: options.signal,
    openTimeoutMs: options.openTimeoutMs,
    timeoutMs: INFER_IDLE_TIMEOUT_MS,
    maxRequestBytes: MAX_INFER_REQUEST_BYTES,
    maxAnswerBytes: MAX_INFER_RESPONSE_FRAME_BYTES
  })
  for await (const frame of frames) {
    switch (frame.type) {
      case 'keepalive':
        continue
      case 'delta':
        yield { type: 'delta', text: frame.text }
        continue
      case 'done':
        yield { type: 'done', finishReason: frame.finishReason, usage: frame.usage }
        return
      case 'error':
        throw new RemoteInferenceError(frame)
    }
  }
}
