import { z } from 'zod'
import { MAX_CACHE_KEY_CHARS, MAX_STOP_STRINGS, MAX_STOP_STRING_CHARS, MAX_TOOLS, MAX_TOOL_DESCRIPTION_CHARS, MAX_TOOL_NAME_CHARS } from '../../inference/index.ts'
import { boundedJson, boundedMembers, ToolName } from './common.ts'

// Anthropic's Messages API shapes, as Claude Code and the Anthropic SDK send them. Request fields without meaning
// here (context_management, output_config, cache_control, service_tier, ...) are accepted and ignored, as unknown
// keys are; content blocks are checked by the route, which names the block it cannot serve.

const ModelName = z.string().min(1).max(512)
/** A content block: its `type` decides the rest, which the route reads (a tool_use block's `input`: any JSON, bounded). */
const Block = boundedMembers(z.looseObject({ type: z.string().min(1).max(64) }))
const Content = z.union([z.string(), z.array(Block).max(4096)])

const Message = z.looseObject({
  /** `system` mid-conversation: Claude Code sends its environment that way */
  role: z.enum(['user', 'assistant', 'system']),
  content: Content
})

const Tool = z.looseObject({
  /** Absent or `custom` for a tool the client runs; Anthropic's server tools (web_search_…, bash_…) have their own. */
  type: z.string().max(64).nullish(),
  name: ToolName,
  description: z.string().max(MAX_TOOL_DESCRIPTION_CHARS).nullish(),
  input_schema: boundedJson(z.record(z.string(), z.unknown())).nullish()
})

const ToolChoice = z.looseObject({
  type: z.enum(['auto', 'any', 'tool', 'none']),
  name: z.string().min(1).max(MAX_TOOL_NAME_CHARS).optional(),
  disable_parallel_tool_use: z.boolean().optional()
})

const Thinking = z.looseObject({
  type: z.enum(['enabled', 'disabled', 'adaptive']),
  budget_tokens: z.number().int().min(0).max(1_000_000).optional()
})

export const MessagesRequest = z.looseObject({
  model: ModelName,
  max_tokens: z.number().int().min(1).max(1_000_000),
  messages: z.array(Message).min(1).max(4096),
  system: Content.nullish(),
  stop_sequences: z.array(z.string().min(1).max(MAX_STOP_STRING_CHARS)).max(MAX_STOP_STRINGS).nullish(),
  temperature: z.number().min(0).max(1).nullish(),
  top_p: z.number().gt(0).max(1).nullish(),
  top_k: z.number().int().min(0).max(100_000).nullish(),
  stream: z.boolean().nullish(),
  tools: z.array(Tool).max(MAX_TOOLS).nullish(),
  tool_choice: ToolChoice.nullish(),
  thinking: Thinking.nullish(),
  metadata: z.looseObject({
    user_id: z.string().max(MAX_CACHE_KEY_CHARS).nullish()
      .describe('keeps this user\'s prompt cache apart from the same requester\'s other users (docs/API.md, Cache keys)')
  }).nullish(),
  /** meshnode: run only locally or on members of this PTN (also the X-PTN-ID header). */
  ptn: z.string().max(128).nullish()
})
export type MessagesRequest = z.infer<typeof MessagesRequest>

/** `POST /v1/messages/count_tokens`: the same request, without what only a generation needs. */
export const CountTokensRequest = MessagesRequest.omit({ max_tokens: true }).extend({
  max_tokens: z.number().int().min(1).max(1_000_000).nullish()
})
export type CountTokensRequest = z.infer<typeof CountTokensRequest>

export const CountTokensResult = z.object({ input_tokens: z.number().int() })

const TextBlockOut = z.object({ type: z.literal('text'), text: z.string() })
/** A reasoning model's thought. `signature` is empty: nothing here signs thoughts, and none is checked when sent back. */
const ThinkingBlockOut = z.object({ type: z.literal('thinking'), thinking: z.string(), signature: z.string() })
const ToolUseBlockOut = z.object({ type: z.literal('tool_use'), id: z.string(), name: z.string(), input: z.record(z.string(), z.unknown()) })

export const Usage = z.object({
  input_tokens: z.number().int().describe('prompt tokens evaluated for this request (those read from the prefix cache are apart)'),
  output_tokens: z.number().int(),
  cache_read_input_tokens: z.number().int().describe('prompt tokens the prefix cache already held'),
  cache_creation_input_tokens: z.number().int()
})
export type Usage = z.infer<typeof Usage>

export const StopReason = z.enum(['end_turn', 'max_tokens', 'stop_sequence', 'tool_use'])

export const MessageOut = z.object({
  id: z.string(),
  type: z.literal('message'),
  role: z.literal('assistant'),
  model: z.string(),
  content: z.array(z.union([ThinkingBlockOut, TextBlockOut, ToolUseBlockOut])),
  stop_reason: StopReason,
  stop_sequence: z.string().nullable(),
  usage: Usage
})
export type MessageOut = z.infer<typeof MessageOut>

export const AnthropicError = z.object({
  type: z.literal('error'),
  error: z.object({
    type: z.string().describe('Anthropic\'s error type: invalid_request_error, authentication_error, billing_error, permission_error, not_found_error, request_too_large, rate_limit_error, overloaded_error, api_error, ...'),
    message: z.string()
  }),
  request_id: z.string().describe('the request\'s id, also in the request-id and X-Request-Id headers')
})

/** The error answers of Anthropic's routes, in its shape. */
export const anthropicErrorResponses = {
  400: AnthropicError,
  401: AnthropicError,
  402: AnthropicError,
  403: AnthropicError,
  404: AnthropicError,
  409: AnthropicError,
  413: AnthropicError,
  429: AnthropicError,
  500: AnthropicError,
  503: AnthropicError
} as const
