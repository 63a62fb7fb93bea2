import { z } from 'zod'
import {
  MAX_EMBEDDING_INPUTS, MAX_EMBEDDING_LENGTH, MAX_LOGIT_BIAS, MAX_LOGIT_BIAS_ENTRIES, MAX_STOP_STRINGS, MAX_STOP_STRING_CHARS,
  MAX_TOOLS, MAX_TOOL_CALL_ID_CHARS, MAX_TOOL_DESCRIPTION_CHARS, MAX_TOOL_NAME_CHARS, type ChatUsage, type DoneEvent, type InferenceEvent, type InferenceRequest
} from '../inference/index.ts'
import { JsonObject, JsonText, ProtocolError } from '../wire/index.ts'
import { ModelIDString } from '../network/index.ts'

// The infer protocol's messages. Every limit is the inference domain's own (src/inference): a peer's request that
// breaks one is refused by the schema before any work, exactly as the HTTP API refuses it. So is the wire's bound on
// free JSON (MAX_JSON_DEPTH): in parameter and output schemas and in a call's arguments (a tool's result
// nested deeper is read as plain text by the engine, as on the HTTP API).

/**
 * Chats, tools, logit_bias, text completions and embeddings. A requester opens it for every request that needs
 * more than a plain chat; the server reads both versions with the same schema (1.0.0 requests are a subset).
 */
export const INFER_PROTOCOL = '/meshnode/infer/1.1.0'   // new version on any wire change
/**
 * 1.2.0 adds a reasoning model's thought (`reasoning` frames; a chat's `thoughtTokens`, and `reasoning` on assistant
 * messages sent back). A server sends thoughts only on it: on older streams a thought is left out (never mixed into the
 * answer). A requester offers it first for every request (`inferProtocols`).
 */
export const INFER_PROTOCOL_REASONING = '/meshnode/infer/1.2.0'
/** Plain chats only: what nodes before 1.1.0 serve. A plain chat still offers it, so that older peers serve it. */
export const INFER_PROTOCOL_CHAT = '/meshnode/infer/1.0.0'
/** The HTTP API takes bodies up to 1 MiB; the same messages, re-encoded, fit here. */
export const MAX_INFER_REQUEST_BYTES = 2 * 1024 * 1024
/** One answer frame: a token's text, an error message, or one embedding vector of up to MAX_EMBEDDING_LENGTH numbers. */
export const MAX_INFER_RESPONSE_FRAME_BYTES = 1024 * 1024
const MAX_MESSAGES = 4096

const ToolCall = z.object({ id: z.string().min(1).max(MAX_TOOL_CALL_ID_CHARS), name: z.string().min(1).max(MAX_TOOL_NAME_CHARS), arguments: JsonText })
const Message = z.object({
  role: z.enum(['system', 'user', 'assistant', 'tool']),
  /** A tool's result is read as JSON when it is JSON nested at most MAX_JSON_DEPTH levels, else as plain text. */
  content: z.string(),
  /** Assistant messages: the calls the model made. Added in 1.1.0. */
  toolCalls: z.array(ToolCall).max(MAX_TOOLS).nullish(),
  /** Tool messages: the call this one answers. Added in 1.1.0. */
  toolCallID: z.string().min(1).max(MAX_TOOL_CALL_ID_CHARS).nullish(),
  /** Assistant messages: the thought before the answer. Added in 1.2.0. */
  reasoning: z.string().nullish()
})
const ResponseFormat = z.discriminatedUnion('type', [
  z.object({ type: z.literal('text') }),
  z.object({ type: z.literal('json_object') }),
  z.object({ type: z.literal('json_schema'), schema: JsonObject })
])
const Tool = z.object({
  name: z.string().min(1).max(MAX_TOOL_NAME_CHARS),
  description: z.string().max(MAX_TOOL_DESCRIPTION_CHARS).nullish(),
  parameters: JsonObject.nullish()
})
const ToolChoice = z.union([z.enum(['none', 'auto', 'required']), z.object({ name: z.string().min(1).max(MAX_TOOL_NAME_CHARS) })])
const LogitBias = z.record(z.string().max(16), z.number().min(-MAX_LOGIT_BIAS).max(MAX_LOGIT_BIAS))
  .refine((bias) => Object.keys(bias).length <= MAX_LOGIT_BIAS_ENTRIES, `at most ${MAX_LOGIT_BIAS_ENTRIES} tokens`)

/** Sampling, shared by chats and completions. The engine checks ranges against the model it runs; the wire only types and sizes. */
const Sampling = {
  maxTokens: z.number().int().positive().nullish(),
  temperature: z.number().nullish(),
  topP: z.number().nullish(),
  topK: z.number().int().nullish(),
  stop: z.array(z.string().max(MAX_STOP_STRING_CHARS)).max(MAX_STOP_STRINGS).nullish(),
  seed: z.number().int().nullish(),
  presencePenalty: z.number().nullish(),
  frequencyPenalty: z.number().nullish(),
  /** Added in 1.1.0. */
  logitBias: LogitBias.nullish()
}

export const WireChatRequest = z.object({
  kind: z.literal('chat'),
  messages: z.array(Message).min(1).max(MAX_MESSAGES),
  ...Sampling,
  responseFormat: ResponseFormat.nullish(),
  /** Added in 1.1.0, with toolChoice and parallelToolCalls. */
  tools: z.array(Tool).max(MAX_TOOLS).nullish(),
  toolChoice: ToolChoice.nullish(),
  parallelToolCalls: z.boolean().nullish(),
  /** Added in 1.2.0. */
  thoughtTokens: z.number().int().nonnegative().nullish()
})
const WireCompletionRequest = z.object({ kind: z.literal('completion'), prompt: z.string(), suffix: z.string().nullish(), ...Sampling })
const WireEmbeddingRequest = z.object({ kind: z.literal('embeddings'), input: z.array(z.string()).min(1).max(MAX_EMBEDDING_INPUTS) })

/** Any request, by `kind`; a 1.0.0 request has no `kind` and is a chat. */
export const WireRequest = z.preprocess(
  (value) => typeof value === 'object' && value != null && !Array.isArray(value) && !('kind' in value) ? { ...value, kind: 'chat' } : value,
  z.discriminatedUnion('kind', [WireChatRequest, WireCompletionRequest, WireEmbeddingRequest])
)

export const InferRequest = z.object({
  modelID: ModelIDString,
  request: WireRequest,
  /** The PTN the requester runs this for, if any; the server's reservation applies to its members. */
  ptnID: z.string().max(256).nullable(),
  /**
   * An opaque label for whom the requesting node asks (a hash of its API key or owner); the server keeps prompt
   * caches of different labels, as of different peers, apart. Optional, added within 1.0.0 (older nodes drop it).
   */
  requester: z.string().max(64).nullish()
})
export type InferRequest = z.input<typeof InferRequest>

/**
 * The versions a requester offers for `request`, newest first: the peer picks the newest it serves. A chat goes out on
 * 1.2.0 wherever the peer serves it, so that a reasoning model's thought reaches the requester, which pays for it; an
 * older peer serves what its version can carry (a plain chat on 1.0.0, anything else but thoughts on 1.1.0).
 */
export function inferProtocols (request: InferenceRequest): string[] {
  if (needsInfer12(request)) return [INFER_PROTOCOL_REASONING]
  if (needsInfer11(request)) return [INFER_PROTOCOL_REASONING, INFER_PROTOCOL]
  return [INFER_PROTOCOL_REASONING, INFER_PROTOCOL, INFER_PROTOCOL_CHAT]
}

/** Whether `request` needs 1.2.0: a thought budget, or thoughts sent back. */
function needsInfer12 (request: InferenceRequest): boolean {
  return request.kind === 'chat' && (request.thoughtTokens != null || request.messages.some(message => message.reasoning != null && message.reasoning !== ''))
}

/** Whether `request` needs 1.1.0, or an older peer can serve it on 1.0.0 (a chat without tools and logit_bias). */
function needsInfer11 (request: InferenceRequest): boolean {
  if (request.kind !== 'chat') return true
  return (request.tools?.length ?? 0) > 0 || request.toolChoice != null || Object.keys(request.logitBias ?? {}).length > 0 ||
    request.messages.some(message => message.role === 'tool' || (message.toolCalls?.length ?? 0) > 0)
}

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

const CallIndex = z.number().int().min(0).max(MAX_TOOLS - 1)
export const InferFrame = z.discriminatedUnion('type', [
  z.object({ type: z.literal('keepalive') }),
  z.object({ type: z.literal('delta'), text: z.string() }),
  /** Opens tool call `index` (0, 1, ... in order): its id and the tool's name. 1.1.0. */
  z.object({ type: z.literal('tool_call'), index: CallIndex, id: z.string().min(1).max(MAX_TOOL_CALL_ID_CHARS), name: z.string().min(1).max(MAX_TOOL_NAME_CHARS) }),
  /** A fragment of an open call's JSON arguments. 1.1.0. */
  z.object({ type: z.literal('tool_arguments'), index: CallIndex, text: z.string() }),
  /** Text of the model's thought, apart from the answer. 1.2.0. */
  z.object({ type: z.literal('reasoning'), text: z.string() }),
  /** The vector of input `index`. 1.1.0. */
  z.object({ type: z.literal('embedding'), index: z.number().int().min(0).max(MAX_EMBEDDING_INPUTS - 1), vector: z.array(z.number()).min(1).max(MAX_EMBEDDING_LENGTH) }),
  // stopSequence: 1.1.0, optional (older peers leave it out, and ignore it)
  z.object({ type: z.literal('done'), finishReason: z.enum(['stop', 'length', 'tool_calls']), usage: Usage, stopSequence: z.string().max(MAX_STOP_STRING_CHARS).nullish() }),
  z.object({
    type: z.literal('error'),
    kind: z.enum(INFER_ERROR_KINDS),
    message: z.string().max(2000),
    param: z.string().max(256).nullable(),
    retryAfterSeconds: z.number().int().min(0).max(3600).nullable(),
    /**
     * An `invalid` request whose prompt does not fit the context: its tokens and the most the context takes (clients
     * compact their history on it). Added within 1.2.0 as an optional field: a node that does not know it drops it
     * (zod strips unknown keys), and one that does reads none from a node that sends none.
     */
    overflow: z.object({ promptTokens: z.number().int().nonnegative(), roomTokens: z.number().int().nonnegative() }).nullish()
  })
])
export type InferFrame = z.infer<typeof InferFrame>

/**
 * What a requester checks of an answer beyond each frame's shape: only frames its request can have, tool calls opened
 * in order before their arguments, one vector per input, all of one length, before `done`. Anything else is a
 * ProtocolError `invalid`: the peer is banned, as for a malformed frame.
 */
export class AnswerCheck {
  readonly #request: InferenceRequest
  #calls = 0
  readonly #vectors = new Set<number>()
  #length: number | null = null

  constructor (request: InferenceRequest) {
    this.#request = request
  }

  check (frame: InferFrame): void {
    const kind = this.#request.kind
    switch (frame.type) {
      case 'keepalive':
      case 'error':
        return
      case 'delta':
        if (kind === 'embeddings') throw invalid('a text delta in an embeddings answer')
        return
      case 'reasoning':
        if (kind !== 'chat') throw invalid('a thought in an answer to a request that is no chat')
        return
      case 'tool_call':
        if (kind !== 'chat' || (this.#request.tools?.length ?? 0) === 0) throw invalid('a tool call in an answer to a request without tools')
        if (frame.index !== this.#calls) throw invalid(`tool call ${frame.index} opened out of order (expected ${this.#calls})`)
        this.#calls++
        return
      case 'tool_arguments':
        if (frame.index >= this.#calls) throw invalid(`arguments for tool call ${frame.index}, which was never opened`)
        return
      case 'embedding':
        if (kind !== 'embeddings' || frame.index >= this.#request.input.length) throw invalid(`a vector for input ${frame.index}, which the request does not have`)
        if (this.#vectors.has(frame.index)) throw invalid(`a second vector for input ${frame.index}`)
        if (this.#length != null && frame.vector.length !== this.#length) throw invalid('vectors of different lengths')
        this.#vectors.add(frame.index)
        this.#length = frame.vector.length
        return
      case 'done':
        if (kind === 'embeddings' && this.#vectors.size !== this.#request.input.length) throw invalid(`done after ${this.#vectors.size} of ${this.#request.input.length} vectors`)
        if (frame.finishReason === 'tool_calls' && this.#calls === 0) throw invalid('finish reason tool_calls without a tool call')
    }
  }
}

function invalid (what: string): ProtocolError {
  return new ProtocolError(`Answer out of protocol: ${what}`, 'invalid')
}

/**
 * Tokens an answer may hold beyond those the requester sees: an end-of-text token, a chat template's closing tokens,
 * the markers around a thought. Every token the requester sees carries at least one byte of text, so an answer is
 * paid for at most the UTF-8 bytes it delivered plus these.
 */
export const UNSEEN_ANSWER_TOKENS = 64
/** Unseen tokens per tool call: the template's wrapping of its name and arguments. */
export const UNSEEN_TOOL_CALL_TOKENS = 64
/** Tokens an embedding input may be read as beyond one per byte: the beginning and end tokens a model adds. */
export const UNSEEN_INPUT_TOKENS = 16

/**
 * How many tokens a peer may be paid for its answer to `request`: a server reports its own count in `done`, and a
 * requester cannot count tokens without the model, so it bounds the count by what it received. The tokens an answer
 * generated are at most the bytes of its text, thoughts, call names and arguments (and of the stop string that ended
 * it), plus UNSEEN_ANSWER_TOKENS and UNSEEN_TOOL_CALL_TOKENS a call, and at most its `maxTokens` plus its thought
 * budget; the tokens an embeddings request reads are at most its inputs' bytes plus UNSEEN_INPUT_TOKENS each. A thought
 * an older server left out of its answer (before 1.2.0) is not paid for: the requester never received it.
 */
export class BillableTokens {
  readonly #request: InferenceRequest
  #bytes = 0
  #calls = 0

  constructor (request: InferenceRequest) {
    this.#request = request
  }

  /** Counts what the answer delivered. */
  add (event: InferenceEvent): void {
    switch (event.type) {
      case 'delta':
      case 'reasoning':
      case 'tool_arguments':
        this.#bytes += Buffer.byteLength(event.text)
        return
      case 'tool_call':
        this.#calls++
        this.#bytes += Buffer.byteLength(event.name)
        return
      default:
    }
  }

  /** `done`'s usage with the tokens billed (generated; for embeddings, read) cut to what the answer can hold. */
  usage (done: DoneEvent): ChatUsage {
    const request = this.#request
    const { usage } = done
    if (request.kind === 'embeddings') {
      const most = request.input.reduce((sum, input) => sum + Buffer.byteLength(input) + UNSEEN_INPUT_TOKENS, 0)
      const promptTokens = Math.min(usage.promptTokens, most)
      return { ...usage, promptTokens, totalTokens: promptTokens + usage.completionTokens }
    }
    let most = this.#bytes + Buffer.byteLength(done.stopSequence ?? '') + UNSEEN_ANSWER_TOKENS + this.#calls * UNSEEN_TOOL_CALL_TOKENS
    if (request.maxTokens != null) most = Math.min(most, request.maxTokens + (request.kind === 'chat' ? request.thoughtTokens ?? 0 : 0))
    const completionTokens = Math.min(usage.completionTokens, most)
    return { ...usage, completionTokens, totalTokens: usage.promptTokens + completionTokens }
  }
}
