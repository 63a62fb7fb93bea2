import { z } from 'zod'

// The OpenAI chat-completions wire shapes we accept and answer. Unknown request keys are ignored, as OpenAI does;
// known keys whose values we cannot honour are refused by the route, naming the parameter (CONTRACT §1).

const TextPart = z.object({ type: z.literal('text'), text: z.string() })
const OtherPart = z.looseObject({ type: z.string() })
const Content = z.union([z.string(), z.array(z.union([TextPart, OtherPart]))])

export const ChatMessageIn = z.looseObject({
  role: z.enum(['system', 'developer', 'user', 'assistant', 'tool', 'function']),
  content: Content.nullable().optional(),
  name: z.string().optional(),
  tool_calls: z.array(z.unknown()).optional()
})

export const ChatCompletionRequest = z.looseObject({
  model: z.string().min(1).max(512),
  messages: z.array(ChatMessageIn).min(1).max(4096),
  temperature: z.number().min(0).max(2).nullish(),
  top_p: z.number().gt(0).max(1).nullish(),
  top_k: z.number().int().min(0).max(100_000).nullish(),
  max_tokens: z.number().int().min(1).max(1_000_000).nullish(),
  max_completion_tokens: z.number().int().min(1).max(1_000_000).nullish(),
  stop: z.union([z.string().min(1), z.array(z.string().min(1)).max(4)]).nullish(),
  seed: z.number().int().nullish(),
  presence_penalty: z.number().min(-2).max(2).nullish(),
  frequency_penalty: z.number().min(-2).max(2).nullish(),
  response_format: z.discriminatedUnion('type', [
    z.object({ type: z.literal('text') }),
    z.object({ type: z.literal('json_object') }),
    z.object({
      type: z.literal('json_schema'),
      json_schema: z.looseObject({ name: z.string().optional(), schema: z.record(z.string(), z.unknown()), strict: z.boolean().nullish() })
    })
  ]).nullish(),
  stream: z.boolean().nullish(),
  stream_options: z.looseObject({ include_usage: z.boolean().optional() }).nullish(),
  user: z.string().max(512).nullish(),
  // Parameters we cannot honour: accepted by the schema so that the route can name them in a clear 400.
  n: z.number().int().min(1).max(128).nullish(),
  logprobs: z.boolean().nullish(),
  top_logprobs: z.number().int().nullish(),
  tools: z.array(z.unknown()).nullish(),
  tool_choice: z.unknown().optional(),
  functions: z.array(z.unknown()).nullish(),
  logit_bias: z.record(z.string(), z.number()).nullish(),
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

export const ChatCompletion = z.object({
  id: z.string(),
  object: z.literal('chat.completion'),
  created: z.number(),
  model: z.string(),
  system_fingerprint: z.string().nullable(),
  choices: z.array(z.object({
    index: z.number(),
    message: z.object({ role: z.literal('assistant'), content: z.string(), refusal: z.null() }),
    logprobs: z.null(),
    finish_reason: z.enum(['stop', 'length'])
  })),
  usage: Usage
})
export type ChatCompletion = z.infer<typeof ChatCompletion>

export interface ChatCompletionChunk {
  id: string
  object: 'chat.completion.chunk'
  created: number
  model: string
  system_fingerprint: string | null
  choices: Array<{ index: number, delta: { role?: 'assistant', content?: string }, logprobs: null, finish_reason: 'stop' | 'length' | null }>
  usage?: z.infer<typeof Usage> | null
}

export const ModelList = z.object({
  object: z.literal('list'),
  data: z.array(z.object({ id: z.string(), object: z.literal('model'), created: z.number(), owned_by: z.string() }))
})
export type ModelList = z.infer<typeof ModelList>
