import { z } from 'zod'
import { PromptCacheKey, REASONING_EFFORTS } from './openai.ts'
import { MAX_TOOL_CALL_ID_CHARS } from '../../inference/index.ts'
import { boundedMembers, ToolName } from './common.ts'

// OpenAI's Responses API shapes, as Codex, the OpenAI Agents SDK and `openai.responses.create` send them. Fields
// without meaning here (include, user, truncation, service_tier, stream_options, safety_identifier, ...) are accepted
// and ignored, as unknown keys are. Input items, their content parts and tools are read by the route, which names the
// one it cannot serve (an image part, an item of an unknown type).

const ModelName = z.string().min(1).max(512)
/** A content part: its `type` decides the rest, which the route reads. */
const Part = z.looseObject({ type: z.string().min(1).max(64) })
const PartsOrText = z.union([z.string(), z.array(Part).max(4096)])

const InputItem = z.looseObject({
  type: z.string().min(1).max(64).optional()
    .describe('message (the default when `role` is given), function_call, function_call_output, reasoning (its reasoning_text content is the thought of the answer after it)'),
  role: z.enum(['user', 'assistant', 'system', 'developer']).optional().describe('message items'),
  content: PartsOrText.optional().describe('message items: a string, or input_text / output_text parts; reasoning items: reasoning_text parts'),
  call_id: z.string().min(1).max(MAX_TOOL_CALL_ID_CHARS).optional().describe('function_call and function_call_output items'),
  arguments: z.string().optional().describe('function_call items: the JSON text of the arguments'),
  output: PartsOrText.optional().describe('function_call_output items: a string, or input_text parts')
})
export type ResponsesInputItem = z.infer<typeof InputItem>

/** Every member bounded: a tool is echoed back whole, every kind. */
const Tool = boundedMembers(z.looseObject({
  type: ToolName.describe('function; tools of other kinds are left out of the prompt and named in X-Meshnode-Ignored-Tools'),
  name: ToolName.optional(),
  description: z.string().nullish(),
  parameters: z.record(z.string(), z.unknown()).nullish(),
  strict: z.boolean().nullish()
}))

const ToolChoice = z.union([
  z.enum(['none', 'auto', 'required']),
  boundedMembers(z.looseObject({
    type: z.string().min(1).max(64).describe('function (with `name`), or allowed_tools (with `mode` and `tools`)'),
    name: z.string().max(256).optional(),
    mode: z.enum(['auto', 'required']).optional(),
    tools: z.array(z.looseObject({ type: z.string().max(64), name: z.string().max(256).optional() })).max(1024).optional()
  }))
])

const TextFormat = z.discriminatedUnion('type', [
  z.looseObject({ type: z.literal('text') }),
  z.looseObject({ type: z.literal('json_object') }),
  z.looseObject({
    type: z.literal('json_schema'),
    name: z.string().max(64).optional(),
    description: z.string().optional(),
    schema: z.record(z.string(), z.unknown()),
    strict: z.boolean().nullish()
  })
])
const TextConfig = z.looseObject({
  format: boundedMembers(TextFormat).optional().describe('json_object and json_schema are enforced by a grammar'),
  verbosity: z.enum(['low', 'medium', 'high']).nullish().describe('accepted; no effect')
})
const Reasoning = z.looseObject({
  effort: z.enum(REASONING_EFFORTS).nullish().describe('a reasoning model\'s thought budget, as reasoning_effort on chat completions'),
  summary: z.string().max(32).nullish().describe('accepted; no effect')
})
const Metadata = z.record(z.string().max(64), z.string().max(512))

export const ResponsesRequest = z.looseObject({
  model: ModelName,
  input: z.union([z.string(), z.array(InputItem).max(4096)]).optional().describe('a user message as a string, or input items'),
  instructions: z.string().nullish().describe('a system message first; not carried over by previous_response_id'),
  tools: z.array(Tool).max(1024).nullish(),
  tool_choice: ToolChoice.nullish(),
  parallel_tool_calls: z.boolean().nullish(),
  max_output_tokens: z.number().int().min(1).max(1_000_000).nullish(),
  temperature: z.number().min(0).max(2).nullish(),
  top_p: z.number().gt(0).max(1).nullish(),
  text: TextConfig.nullish(),
  reasoning: Reasoning.nullish(),
  store: z.boolean().nullish().describe('keep the response for GET and previous_response_id (default true)'),
  previous_response_id: z.string().min(1).max(256).nullish(),
  stream: z.boolean().nullish(),
  metadata: Metadata.nullish(),
  prompt_cache_key: PromptCacheKey.nullish(),
  // Parameters we cannot honour: accepted by the schema so that the route can name them in a clear 400.
  background: z.boolean().nullish(),
  conversation: z.unknown().optional(),
  prompt: z.unknown().optional(),
  top_logprobs: z.number().int().nullish(),
  /** meshnode: run only locally or on members of this PTN (also the X-PTN-ID header). */
  ptn: z.string().max(128).nullish()
})
export type ResponsesRequest = z.infer<typeof ResponsesRequest>

const OutputText = z.object({ type: z.literal('output_text'), text: z.string(), annotations: z.array(z.unknown()).describe('always empty') })
const ItemStatus = z.enum(['in_progress', 'completed', 'incomplete']).describe('incomplete when max_output_tokens cut the item short')

export const OutputMessage = z.object({
  type: z.literal('message'),
  id: z.string(),
  status: ItemStatus,
  role: z.literal('assistant'),
  content: z.array(OutputText)
})
export const OutputFunctionCall = z.object({
  type: z.literal('function_call'),
  id: z.string(),
  call_id: z.string(),
  name: z.string(),
  arguments: z.string().describe('JSON text, valid against the tool\'s parameters'),
  status: ItemStatus
})
/** A reasoning model's thought, apart from its answer: its text in `content` (there is no summary here). */
export const OutputReasoning = z.object({
  type: z.literal('reasoning'),
  id: z.string(),
  status: ItemStatus,
  summary: z.array(z.object({ type: z.literal('summary_text'), text: z.string() })).describe('always empty'),
  content: z.array(z.object({ type: z.literal('reasoning_text'), text: z.string() }))
})
export const OutputItem = z.discriminatedUnion('type', [OutputMessage, OutputFunctionCall, OutputReasoning])
export type OutputItem = z.infer<typeof OutputItem>

export const ResponseUsage = z.object({
  input_tokens: z.number().int(),
  input_tokens_details: z.object({ cached_tokens: z.number().int().describe('input tokens reused from this requester\'s earlier requests') }),
  output_tokens: z.number().int(),
  output_tokens_details: z.object({ reasoning_tokens: z.number().int() }),
  total_tokens: z.number().int()
})
export type ResponseUsage = z.infer<typeof ResponseUsage>

export const ResponseObject = z.object({
  id: z.string(),
  object: z.literal('response'),
  created_at: z.number().int(),
  status: z.enum(['in_progress', 'completed', 'incomplete', 'failed']),
  error: z.object({ code: z.string(), message: z.string() }).nullable(),
  incomplete_details: z.object({ reason: z.literal('max_output_tokens') }).nullable(),
  instructions: z.string().nullable(),
  model: z.string(),
  output: z.array(OutputItem),
  output_text: z.string().describe('the text of the output messages, joined'),
  parallel_tool_calls: z.boolean(),
  tool_choice: z.union([z.enum(['none', 'auto', 'required']), z.record(z.string(), z.unknown())]),
  tools: z.array(z.record(z.string(), z.unknown())).describe('as the request gave them, every kind'),
  temperature: z.number().nullable(),
  top_p: z.number().nullable(),
  max_output_tokens: z.number().int().nullable(),
  previous_response_id: z.string().nullable(),
  store: z.boolean().describe('whether the response was kept: false when asked so, or when it was too large to keep'),
  metadata: Metadata,
  text: z.object({ format: z.record(z.string(), z.unknown()) }),
  reasoning: z.object({ effort: z.string().nullable(), summary: z.string().nullable() }),
  truncation: z.literal('disabled'),
  usage: ResponseUsage.nullable()
})
export type ResponseObject = z.infer<typeof ResponseObject>

export const ResponseParams = z.object({ id: z.string().min(1).max(256) })
export const DeletedResponse = z.object({ id: z.string(), object: z.literal('response'), deleted: z.literal(true) })
