// What a generation is asked and what it answers, independent of HTTP and of where it runs: the local engine and
// a remote peer's engine take and give the same shapes.
import type { Requester } from './slot-cache.ts'

export interface ChatMessage {
  role: 'system' | 'user' | 'assistant'
  content: string
}

export type ResponseFormat = { type: 'text' } | { type: 'json_object' } | { type: 'json_schema', schema: object }

export interface ChatRequest {
  /** The whole conversation; a trailing assistant message is continued (prefill), not answered. */
  messages: ChatMessage[]
  /** Most tokens to generate. Default: until the context is full. Capped at what the context has room for. */
  maxTokens?: number | null
  /** 0 to 2; 0 picks the most likely token every time. Default 1, as in OpenAI's API. */
  temperature?: number | null
  /** Nucleus sampling, (0, 1]. Default 1 (off). */
  topP?: number | null
  /** Sample only from the K most likely tokens; 0 or absent means all of them. */
  topK?: number | null
  /** Strings that end the generation; the one that matched is not part of the text. */
  stop?: string[] | null
  /** With a seed, the same request on the same model gives the same text. Default: a fresh random seed. */
  seed?: number | null
  /** -2 to 2, OpenAI's meaning: lowers the chance of any token already generated. */
  presencePenalty?: number | null
  /** -2 to 2, OpenAI's meaning: lowers a token's chance by how often it was already generated. */
  frequencyPenalty?: number | null
  responseFormat?: ResponseFormat | null
}

export type FinishReason = 'stop' | 'length'

export interface ChatUsage {
  /** Tokens of the prompt as the model's chat template renders it, special tokens included. */
  promptTokens: number
  /** Tokens the model sampled for this answer, including a stop string's tokens and the end-of-generation token. */
  completionTokens: number
  totalTokens: number
  /** Prompt tokens a slot already held from this requester's earlier request, reused rather than evaluated again. */
  cachedTokens: number
}

export type ChatEvent =
  | { type: 'delta', text: string }
  | { type: 'done', finishReason: FinishReason, usage: ChatUsage }

export interface GenerateOptions {
  /** Aborting stops the generation within a token and frees its slot; the iterator then throws `signal.reason`. */
  signal?: AbortSignal
  /**
   * Who the generation runs for (`local`, `key:<id>`, `peer:<nodeID>`, `ptn:<ptnID>`): requests of one requester
   * reuse each other's evaluated prompts, nobody else's. Default: a requester of its own, which reuses nothing.
   */
  requester?: Requester
}

/** Anything that answers a chat request as a stream: the local engine, a remote peer. */
export interface ChatEngine {
  generate (request: ChatRequest, options?: GenerateOptions): AsyncIterable<ChatEvent>
}

/** Where a request ran: this node, or the peer with that nodeID (the `X-Served-By` header). */
export type ServedBy = 'local' | `peer:${string}`

/** A chat request that names the model it wants, as the HTTP API receives it. */
export interface RoutedChatRequest extends ChatRequest {
  modelID: string
}

export interface RouteOptions extends GenerateOptions {
  /** Run only locally or on verified members of this PTN. */
  ptnID?: string | null
}

/** A generation placed somewhere. `servedBy` may change while no event has been read (failover to the next peer). */
export interface RoutedGeneration {
  readonly events: AsyncIterator<ChatEvent>
  readonly servedBy: ServedBy
}

/** Decides where a request runs (this node or a peer) and starts it there. */
export interface ChatRouter {
  generate (request: RoutedChatRequest, options?: RouteOptions): RoutedGeneration
  /** The models requests can name right now, and who serves them, for GET /v1/models. */
  models (): Array<{ modelID: string, ownedBy: ServedBy }>
}
