import type { Stream } from '@libp2p/interface'
import type { Logger } from 'pino'
import { z } from 'zod'
import { BusyError, InvalidInputError, UnavailableError } from '../errors.ts'
import type { ChatEvent, ChatRequest, ChatUsage } from '../inference/index.ts'
import { ModelIDString } from './capabilities.ts'
import { askPeer, firstOrTimeout, readRequest, writeMessage, type FrameStream, type PeerStreams } from '../wire/index.ts'
import { publicSlots, type RemotePeer } from './peer-network.ts'

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
  stop: z.array(z.string().max(1024)).max(16).nullish(),
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

export interface InferServiceDeps {
  /** The local engine. */
  engine: {
    generate (request: ChatRequest, options: { signal?: AbortSignal, requester?: string }): AsyncIterable<ChatEvent>
    stats (): { slots: number }
    loaded (): { modelID: string } | null
  }
  sameModel: (a: string, b: string) => boolean
  settings: { get (): { org_capacity_reservation: number, inference_backend: string } }
  /** Whether a requester is a verified member of one of this node's PTNs (it may use the reserved slots). */
  isPtnMember: (nodeID: string) => boolean
  /** Whether this node and the requester are both verified members of `ptnID` (its members then share prompt caches). */
  sharesPtn?: (nodeID: string, ptnID: string) => boolean
  /** Counts a request for a model we do not serve (demand-driven models). */
  recordDemand: (modelID: string) => void
  /** After a request was answered in full: who asked, and the tokens we generated for it. */
  onServed?: (served: { nodeID: string, modelID: string, usage: ChatUsage }) => void
  log: Logger
}

/**
 * The serving side: runs peers' requests on the local engine when the requested model is the one loaded, keeping
 * `org_capacity_reservation` of the slots for members of this node's PTNs.
 */
export class InferService {
  readonly #deps: InferServiceDeps
  /** Requests from outside our PTNs running or waiting now. */
  #publicActive = 0

  constructor (deps: InferServiceDeps) {
    this.#deps = deps
  }

  /** Requests from non-members admitted now (for tests and the snapshot). */
  get publicActive (): number {
    return this.#publicActive
  }

  readonly handle = async (stream: Stream, peer: RemotePeer): Promise<void> => {
    // A protocol error here (malformed, oversized, invalid) propagates: the network drops and bans the peer.
    const { frames, request: ask } = await readRequest(stream, InferRequest, { maxRequestBytes: MAX_INFER_REQUEST_BYTES, timeoutMs: INFER_REQUEST_TIMEOUT_MS })
    const peerGone = new AbortController()
    stream.addEventListener('close', () => { peerGone.abort(new Error('The requesting peer closed the stream')) }, { once: true })
    const member = this.#deps.isPtnMember(peer.nodeID)
    let admitted = false
    try {
      const refusal = this.#refusal(ask.modelID, member)
      if (refusal != null) {
        await sendFinal(frames, refusal, peerGone.signal)
        return
      }
      if (!member) this.#publicActive++
      admitted = true
      const usage = await this.#serve(frames, ask, this.#requester(peer.nodeID, ask), peerGone.signal)
      if (usage != null) this.#deps.onServed?.({ nodeID: peer.nodeID, modelID: ask.modelID, usage })
    } finally {
      if (admitted && !member) this.#publicActive--
    }
  }

  #refusal (modelID: string, member: boolean): Extract<InferFrame, { type: 'error' }> | null {
    const settings = this.#deps.settings.get()
    const loaded = this.#deps.engine.loaded()
    if (settings.inference_backend === 'peers' || loaded == null || !this.#deps.sameModel(loaded.modelID, modelID)) {
      this.#deps.recordDemand(modelID)
      return errorFrame('unavailable', `Model ${modelID} is not served by this node`)
    }
    if (!member) {
      const slots = this.#deps.engine.stats().slots
      const open = publicSlots(slots, settings.org_capacity_reservation)
      if (this.#publicActive >= open) {
        return errorFrame('busy', `All ${open} of this node's slots open to requests from outside its PTNs are in use`, { retryAfterSeconds: 1 })
      }
    }
    return null
  }

  /** Whose prompt cache the request may reuse: its PTN's, when both are members of it; else its own peer's and label's. */
  #requester (nodeID: string, ask: InferRequest): string {
    if (ask.ptnID != null && this.#deps.sharesPtn?.(nodeID, ask.ptnID) === true) return `ptn:${ask.ptnID}`
    return ask.requester == null ? `peer:${nodeID}` : `peer:${nodeID}/${ask.requester}`
  }

  /** Streams the answer; returns the usage once `done` was sent, null when the generation failed (error sent). */
  async #serve (frames: FrameStream, ask: InferRequest, requester: string, signal: AbortSignal): Promise<ChatUsage | null> {
    const events = this.#deps.engine.generate(ask.request as ChatRequest, { signal, requester })[Symbol.asyncIterator]()
    try {
      // Keep-alives while the request waits for a slot: the requester can tell a queued request from a dead peer.
      let next = events.next()
      for (;;) {
        const result = await firstOrTimeout(next, INFER_KEEPALIVE_MS)
        if (result === 'timeout') {
          await writeMessage(frames, { type: 'keepalive' }, { signal })
          continue
        }
        if (result.done === true) throw new Error('generation ended without a final event')
        const event = result.value
        if (event.type === 'delta') {
          // Tokens generated while the last frame was being written go out together: under backpressure (a slow
          // relay, a busy event loop) one frame per token would cost more than the tokens themselves.
          let text = event.text
          next = events.next()
          for (let ready = await settledNow(next); ready != null && ready.done !== true && ready.value.type === 'delta' && text.length < COALESCE_MAX_CHARS; ready = await settledNow(next)) {
            text += ready.value.text
            next = events.next()
          }
          await writeMessage(frames, { type: 'delta', text }, { signal })
          continue
        }
        // The wire request carries no tools, so a chat served for a peer ends in text
        if (event.type !== 'done' || event.finishReason === 'tool_calls') throw new Error(`unexpected ${event.type} event for a peer`)
        await sendFinal(frames, { type: 'done', finishReason: event.finishReason, usage: event.usage }, signal)
        return event.usage
      }
    } catch (err) {
      if (signal.aborted) return null   // the requester left; the generation stopped with it
      const frame = toErrorFrame(err)
      if (frame.kind === 'internal') this.#deps.log.error({ err, modelID: ask.modelID }, 'serving a peer request failed')
      await sendFinal(frames, frame, signal)
      return null
    } finally {
      await events.return?.()
    }
  }
}

async function sendFinal (frames: FrameStream, frame: InferFrame, signal: AbortSignal): Promise<void> {
  await writeMessage(frames, frame, { signal })
  await frames.stream.close({ signal })
}

const NOT_SETTLED = Symbol('not settled')

/** The promise's result if it has already settled, else null; never waits (beyond a microtask). */
async function settledNow<T> (promise: Promise<T>): Promise<T | null> {
  const result = await Promise.race([promise, Promise.resolve(NOT_SETTLED)])
  return result === NOT_SETTLED ? null : result as T
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
