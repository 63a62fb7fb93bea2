import { z } from 'zod'
import { MAX_CACHE_KEY_CHARS, MAX_STOP_STRINGS, MAX_STOP_STRING_CHARS } from '../../inference/index.ts'
import { MAX_EMBEDDING_INPUTS, MAX_LOGIT_BIAS, MAX_TOOLS, MAX_TOOL_CALL_ID_CHARS, MAX_TOOL_DESCRIPTION_CHARS, MAX_TOOL_NAME_CHARS } from '../../inference/index.ts'
import { boundedJson } from './common.ts'

// The OpenAI wire shapes we accept and answer: chat completions, text completions, embeddings, models, and
// llama-server's tokenize/detokenize. Unknown request keys are ignored, as OpenAI does; known keys whose values we
// cannot honour are refused by the route, naming the parameter.

const ModelName = z.string().min(1).max(512)

/** OpenAI's reasoning efforts, and the thought tokens each allows here (null: node-llama-cpp's default, a share of the context). */
export const REASONING_EFFORTS = ['none', 'minimal', 'low', 'medium', 'high', 'xhigh'] as const
export const THOUGHT_TOKENS_BY_EFFORT: Record<typeof REASONING_EFFORTS[number], number | null> = {
  none: 0, minimal: 0, low: 1024, medium: 4096, high: null, xhigh: null
}
const TextPart = z.object({ type: z.literal('text'), text: z.string() })
const OtherPart = z.looseObject({ type: z.string() })
const Content = z.union([z.string(), z.array(z.union([TextPart, OtherPart]))])

const ToolCallIn = z.looseObject({
  id: z.string().min(1).max(MAX_TOOL_CALL_ID_CHARS),
  type: z.literal('function'),
  function: z.looseObject({ name: z.string().min(1).max(MAX_TOOL_NAME_CHARS), arguments: z.string() })
})

export const ChatMessageIn = z.looseObject({
  role: z.enum(['system', 'developer', 'user', 'assistant', 'tool', 'function']),
  content: Content.nullable().optional(),
  name: z.string().optional(),
  /** Assistant messages: the calls it made. */
  tool_calls: z.array(ToolCallIn).max(MAX_TOOLS).nullish(),
  /** Tool messages: the call this is the result of. */
  tool_call_id: z.string().min(1).max(MAX_TOOL_CALL_ID_CHARS).nullish(),
  /** Assistant messages: the thought of a reasoning model, sent back (clients use one name or the other). */
  reasoning_content: z.string().nullish(),
  reasoning: z.string().nullish()
})

const Tool = z.looseObject({
  type: z.string().describe('"function"; other tool types are refused'),
  function: z.looseObject({
    name: z.string().min(1).max(MAX_TOOL_NAME_CHARS),
    description: z.string().max(MAX_TOOL_DESCRIPTION_CHARS).nullish(),
    parameters: boundedJson(z.record(z.string(), z.unknown())).nullish(),
    strict: z.boolean().nullish()
  }).optional()
})

const ToolChoice = z.union([
  z.enum(['none', 'auto', 'required']),
  z.looseObject({ type: z.literal('function'), function: z.looseObject({ name: z.string().min(1).max(MAX_TOOL_NAME_CHARS) }) })
])

const LogitBias = z.record(z.string(), z.number().min(-MAX_LOGIT_BIAS).max(MAX_LOGIT_BIAS))
const Stop = z.union([z.string().min(1).max(MAX_STOP_STRING_CHARS), z.array(z.string().min(1).max(MAX_STOP_STRING_CHARS)).max(MAX_STOP_STRINGS)])
const StreamOptions = z.looseObject({ include_usage: z.boolean().optional() })
/** OpenAI's field, chat and Responses: the requests naming one key share a slot and saved prefixes apart from the requester's others. */
export const PromptCacheKey = z.string().max(MAX_CACHE_KEY_CHARS)
  .describe('keeps this session\'s prompt cache apart from the same requester\'s other sessions (docs/API.md, Cache keys)')

/** Sampling parameters chat and text completions share. */
const Sampling = {
  temperature: z.number().min(0).max(2).nullish(),
  top_p: z.number().gt(0).max(1).nullish(),
  top_k: z.number().int().min(0).max(100_000).nullish(),
  max_tokens: z.number().int().min(1).max(1_000_000).nullish(),
  stop: Stop.nullish(),
  seed: z.number().int().nullish(),
  presence_penalty: z.number().min(-2).max(2).nullish(),
  frequency_penalty: z.number().min(-2).max(2).nullish(),
  logit_bias: LogitBias.nullish().describe('token id → -100..100 added to its logit; -100 bans the token'),
  stream: z.boolean().nullish(),
  stream_options: StreamOptions.nullish(),
  user: z.string().max(512).nullish(),
  /** Only 1 is supported; accepted so the route can name it in a clear 400. */
  n: z.number().int().min(1).max(128).nullish()
}

export const ChatCompletionRequest = z.looseObject({
  model: ModelName,
  messages: z.array(ChatMessageIn).min(1).max(4096),
  ...Sampling,
  max_completion_tokens: z.number().int().min(1).max(1_000_000).nullish(),
  response_format: z.discriminatedUnion('type', [
    z.object({ type: z.literal('text') }),
    z.object({ type: z.literal('json_object') }),
    z.object({
      type: z.literal('json_schema'),
      json_schema: z.looseObject({ name: z.string().optional(), schema: boundedJson(z.record(z.string(), z.unknown())), strict: z.boolean().nullish() })
    })
  ]).nullish(),
  tools: z.array(Tool).max(MAX_TOOLS).nullish(),
  tool_choice: ToolChoice.nullish(),
  parallel_tool_calls: z.boolean().nullish(),
  reasoning_effort: z.enum(REASONING_EFFORTS).nullish().describe('a reasoning model\'s thought budget (docs/API.md, Reasoning models)'),
  prompt_cache_key: PromptCacheKey.nullish(),
  // Parameters we cannot honour: accepted by the schema so that the route can name them in a clear 400.
  logprobs: z.boolean().nullish(),
  top_logprobs: z.number().int().nullish(),
  functions: z.array(z.unknown()).nullish(),
  function_call: z.unknown().optional(),
  /** meshnode: run only locally or on members of this PTN (also header X-PTN-ID). */
  ptn: z.string().max(128).nullish()
})
export type ChatCompletionRequest = z.infer<typeof ChatCompletionRequest>

const Usage = z.object({
  prompt_tokens: z.number(),
  completion_tokens: z.number(),
  total_tokens: z.number(),
  /** OpenAI's field: prompt tokens reused from this requester's earlier requests instead of evaluated again. */
  prompt_tokens_details: z.object({ cached_tokens: z.number() })
})
export type Usage = z.infer<typeof Usage>
const FinishReason = z.enum(['stop', 'length', 'tool_calls'])

const ToolCallOut = z.object({
  id: z.string(),
  type: z.literal('function'),
  function: z.object({ name: z.string(), arguments: z.string().describe('JSON text, valid against the tool\'s parameters') })
})
export type ToolCallOut = z.infer<typeof ToolCallOut>

export const ChatCompletion = z.object({
  id: z.string(),
  object: z.literal('chat.completion'),
  created: z.number(),
  model: z.string(),
  system_fingerprint: z.string().nullable(),
  choices: z.array(z.object({
    index: z.number(),
    message: z.object({
      role: z.literal('assistant'),
      content: z.string().nullable().describe('null when the answer is only tool calls'),
      refusal: z.null(),
      tool_calls: z.array(ToolCallOut).optional(),
      reasoning_content: z.string().optional().describe('a reasoning model\'s thought, apart from the answer'),
      reasoning: z.string().optional().describe('the same thought, under the name other clients read')
    }),
    logprobs: z.null(),
    finish_reason: FinishReason
  })),
  usage: Usage
})
export type ChatCompletion = z.infer<typeof ChatCompletion>

/** A tool call's part in a stream chunk: the first carries id, type and name; later ones argument fragments. */
export interface ToolCallDelta {
  index: number
  id?: string
  type?: 'function'
  function: { name?: string, arguments: string }
}

export interface ChatCompletionChunk {
  id: string
  object: 'chat.completion.chunk'
  created: number
  model: string
  system_fingerprint: string | null
  choices: Array<{
    index: number
    delta: { role?: 'assistant', content?: string, reasoning_content?: string, reasoning?: string, tool_calls?: ToolCallDelta[] }
    logprobs: null
    finish_reason: z.infer<typeof FinishReason> | null
  }>
  usage?: Usage | null
}

/** Legacy text completions (`/v1/completions`). */
export const CompletionRequest = z.looseObject({
  model: ModelName,
  prompt: z.union([z.string(), z.array(z.string()), z.array(z.number()), z.array(z.array(z.number()))])
    .describe('a string (or a list of one string); token ids are refused'),
  suffix: z.string().nullish().describe('fill-in-the-middle: the text after the completion (models with infill tokens only)'),
  ...Sampling,
  echo: z.boolean().nullish(),
  // Parameters we cannot honour: accepted by the schema so that the route can name them in a clear 400.
  best_of: z.number().int().min(1).max(128).nullish(),
  logprobs: z.number().int().min(0).max(20).nullish()
})
export type CompletionRequest = z.infer<typeof CompletionRequest>

export const TextCompletion = z.object({
  id: z.string(),
  object: z.literal('text_completion'),
  created: z.number(),
  model: z.string(),
  system_fingerprint: z.string().nullable(),
  choices: z.array(z.object({ text: z.string(), index: z.number(), logprobs: z.null(), finish_reason: FinishReason.nullable() })),
  usage: Usage.nullish()
})
export type TextCompletion = z.infer<typeof TextCompletion>

export const EmbeddingRequest = z.looseObject({
  model: ModelName,
  input: z.union([z.string(), z.array(z.string()), z.array(z.number()), z.array(z.array(z.number()))])
    .describe(`a string or up to ${MAX_EMBEDDING_INPUTS} strings; token ids are refused`),
  encoding_format: z.enum(['float', 'base64']).nullish().describe('base64: little-endian float32 bytes'),
  dimensions: z.number().int().min(1).nullish().describe('only the model\'s own length is accepted'),
  user: z.string().max(512).nullish()
})
export type EmbeddingRequest = z.infer<typeof EmbeddingRequest>

export const EmbeddingList = z.object({
  object: z.literal('list'),
  data: z.array(z.object({ object: z.literal('embedding'), index: z.number(), embedding: z.union([z.array(z.number()), z.string()]) })),
  model: z.string(),
  usage: z.object({ prompt_tokens: z.number(), total_tokens: z.number() })
})
export type EmbeddingList = z.infer<typeof EmbeddingList>

export const TokenizeRequest = z.looseObject({
  model: ModelName,
  content: z.string(),
  add_special: z.boolean().nullish().describe('put the model\'s beginning-of-text token first (default false)')
})
export const TokenizeResult = z.object({ tokens: z.array(z.number().int()) })
export const DetokenizeRequest = z.looseObject({ model: ModelName, tokens: z.array(z.number().int()) })
export const DetokenizeResult = z.object({ content: z.string() })

export const Model = z.object({ id: z.string(), object: z.literal('model'), created: z.number(), owned_by: z.string() })
export const ModelList = z.object({ object: z.literal('list'), data: z.array(Model) })
export type ModelList = z.infer<typeof ModelList>
