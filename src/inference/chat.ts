// What a generation is asked and what it answers, independent of HTTP and of where it runs: the local engine and
// a remote peer's engine take and give the same shapes.
import type { Requester } from './slot-cache.ts'

/** A call the model made: `arguments` is the JSON text it generated (valid against the tool's parameters). */
export interface ToolCall {
  id: string
  name: string
  arguments: string
}

export interface ChatMessage {
  role: 'system' | 'user' | 'assistant' | 'tool'
  content: string
  /** Assistant messages only: the calls it made, each answered by a later `tool` message with the same id. */
  toolCalls?: ToolCall[] | null
  /** Tool messages only: the id of the call this message gives the result of. */
  toolCallID?: string | null
  /** Assistant messages only: the model's thought before this answer, sent back with the history. */
  reasoning?: string | null
}

/** A function the model may call; `parameters` is a JSON Schema its arguments must match (default: none). */
export interface ToolDefinition {
  name: string
  description?: string | null
  parameters?: Record<string, unknown> | null
}

/** `auto`: the model decides; `required`: it must call one; `{ name }`: it must call that one; `none`: text only. */
export type ToolChoice = 'none' | 'auto' | 'required' | { name: string }

export type ResponseFormat = { type: 'text' } | { type: 'json_object' } | { type: 'json_schema', schema: object }

/** How tokens are sampled and when generation stops: the same for chats and text completions. */
export interface SamplingRequest {
  /** Most tokens to generate. Default: until the context is full. Capped at what the context has room for. */
  maxTokens?: number | null
  /** 0 to 2; 0 picks the most likely token every time. Default 1, as in OpenAI's API. */
  temperature?: number | null
  /** Nucleus sampling, (0, 1]. Default 1 (off). */
  topP?: number | null
  /** Sample only from the K most likely tokens; 0 means all of them. Default DEFAULT_TOP_K (40), as llama-server. */
  topK?: number | null
  /** Strings that end the generation; the one that matched is not part of the text. */
  stop?: string[] | null
  /** With a seed, the same request on the same model gives the same text. Default: a fresh random seed. */
  seed?: number | null
  /** -2 to 2, OpenAI's meaning: lowers the chance of any token already generated. */
  presencePenalty?: number | null
  /** -2 to 2, OpenAI's meaning: lowers a token's chance by how often it was already generated. */
  frequencyPenalty?: number | null
  /** Token id (as a decimal string) → -100..100 added to its logit; -100 bans the token, 100 all but forces it. */
  logitBias?: Record<string, number> | null
}

export interface ChatRequest extends SamplingRequest {
  /** The whole conversation; a trailing assistant message is continued (prefill), not answered. */
  messages: ChatMessage[]
  responseFormat?: ResponseFormat | null
  /** Functions the model may call, in the model's own function-call format. */
  tools?: ToolDefinition[] | null
  /** Default `auto` when tools are given. */
  toolChoice?: ToolChoice | null
  /** Whether one answer may hold several calls. Default true. */
  parallelToolCalls?: boolean | null
  /**
   * Most tokens a reasoning model may think before it answers (its thought segment): 0 answers without a thought;
   * null leaves node-llama-cpp's default (a share of the context). No effect on a model without thought segments.
   */
  thoughtTokens?: number | null
}

/** A plain text completion: the model continues `prompt` (or fills in between `prompt` and `suffix`). */
export interface CompletionRequest extends SamplingRequest {
  prompt: string
  /** Fill-in-the-middle: the text that follows the completion. Only for models with infill tokens. */
  suffix?: string | null
}

export interface EmbeddingRequest {
  /** One vector per string, in order. */
  input: string[]
}

/** Any request the engine serves; the network carries the same union. */
export type InferenceRequest =
  | ({ kind: 'chat' } & ChatRequest)
  | ({ kind: 'completion' } & CompletionRequest)
  | ({ kind: 'embeddings' } & EmbeddingRequest)

export type FinishReason = 'stop' | 'length' | 'tool_calls'

export interface ChatUsage {
  /** Tokens of the prompt as the model's chat template renders it, special tokens included. */
  promptTokens: number
  /** Tokens the model sampled for this answer, including a stop string's tokens and the end-of-generation token. */
  completionTokens: number
  totalTokens: number
  /** Prompt tokens a slot already held from this requester's earlier request, reused rather than evaluated again. */
  cachedTokens: number
}

/** `stopSequence`: the caller's stop string that ended the answer, when one did (Anthropic's `stop_sequence`). */
export type DoneEvent = { type: 'done', finishReason: FinishReason, usage: ChatUsage, stopSequence?: string | null }

/**
 * A chat streams text deltas, and tool calls as OpenAI streams them: `tool_call` opens call `index` with its id and
 * name, then `tool_arguments` carry fragments of its JSON arguments. One `done` event ends every stream.
 */
export type ChatEvent =
  | { type: 'delta', text: string }
  /** Text of the model's thought (a reasoning model's thought segment), never part of the answer. */
  | { type: 'reasoning', text: string }
  | { type: 'tool_call', index: number, id: string, name: string }
  | { type: 'tool_arguments', index: number, text: string }
  | DoneEvent

export type CompletionEvent = Extract<ChatEvent, { type: 'delta' | 'done' }>

/** An embeddings request answers one `embedding` event per input (any order), then `done`. */
export type EmbeddingEvent = { type: 'embedding', index: number, vector: number[] } | DoneEvent

export type InferenceEvent = ChatEvent | EmbeddingEvent

export interface GenerateOptions {
  /** Aborting stops the generation within a token and frees its slot; the iterator then throws `signal.reason`. */
  signal?: AbortSignal
  /**
   * Who the generation runs for (`local`, `key:<id>`, `peer:<nodeID>`, `ptn:<ptnID>`): requests of one requester
   * reuse each other's evaluated prompts, nobody else's. Default: a requester of its own, which reuses nothing.
   */
  requester?: Requester
  /**
   * The model the caller placed this request on. If another model is loaded by the time it is admitted (a swap
   * happened meanwhile), the engine refuses it with ModelSwappedError instead of answering with the wrong model.
   */
  modelID?: string
}

/** Anything that answers a chat request as a stream: the local engine, a remote peer. */
export interface ChatEngine {
  generate (request: ChatRequest, options?: GenerateOptions): AsyncIterable<ChatEvent>
}

/** Where a request ran: this node, or the peer with that nodeID (the `X-Served-By` header). */
export type ServedBy = 'local' | `peer:${string}`

/** A request that names the model it wants, as the HTTP API receives it. */
export type RoutedRequest = InferenceRequest & { modelID: string }
/** A chat request that names the model it wants. */
export type RoutedChatRequest = ChatRequest & { modelID: string }

export interface RouteOptions extends GenerateOptions {
  /** Run only locally or on verified members of this PTN. */
  ptnID?: string | null
}

/** A generation placed somewhere. `servedBy` may change while no event has been read (failover to the next peer). */
export interface RoutedGeneration<E = InferenceEvent> {
  readonly events: AsyncIterator<E>
  readonly servedBy: ServedBy
}

/** A model a request can name, and where it would run. */
export interface ModelListing {
  modelID: string
  /** `local` for a model on this node (loaded or downloaded), else the peer that would serve it. */
  ownedBy: ServedBy
  /** Loaded and answering now (a downloaded model is loaded on first use). */
  loaded: boolean
}

/** Decides where a request runs (this node or a peer) and starts it there. */
export interface ChatRouter {
  /**
   * Places a request. Throws at once (before any event) when nothing can serve the model: NotFoundError for a
   * model neither on this node nor served by a peer, UnavailableError when it exists but cannot be reached now.
   */
  route (request: RoutedRequest, options?: RouteOptions): RoutedGeneration
  /** The models requests can name right now, and who serves them, for GET /v1/models. */
  models (): ModelListing[]
}
