import { randomUUID } from 'node:crypto'
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod'
import { InvalidInputError } from '../../errors.ts'
import type { ChatEvent, ChatMessage, ChatRouter, ChatUsage, DoneEvent, RoutedGeneration, RoutedRequest, SamplingRequest, ToolChoice } from '../../inference/index.ts'
import { keyedRequester } from '../../inference/index.ts'
import { jsonTextDepthExceeds, nestedTooDeep } from '../../wire/index.ts'
import { collectAnswer, streamGeneration } from '../generation-stream.ts'
import { requesterOf } from '../guards.ts'
import { ChatCompletion, ChatCompletionRequest, THOUGHT_TOKENS_BY_EFFORT, type ChatCompletionChunk, type CompletionRequest, type ToolCallOut, type Usage } from '../schemas/openai.ts'
import { errorResponses } from '../schemas/common.ts'
import { clientGone } from '../sse.ts'

/** What every OpenAI generation route (chat, completions, embeddings) is given. */
export interface InferenceRoutesOptions {
  router: ChatRouter
  /** Called when a request was served, for the models' least-recently-used bookkeeping. */
  onServed?: (modelID: string) => void
}

export const chatRoutes: FastifyPluginAsyncZod<InferenceRoutesOptions> = async (app, { router, onServed }) => {
  app.post('/v1/chat/completions', {
    schema: { summary: 'Chat completion, streamed or not (OpenAI)', tags: ['openai'], body: ChatCompletionRequest, response: { 200: ChatCompletion, ...errorResponses } }
  }, async (request, reply) => {
    const chat = toChatRequest(request.body)
    const signal = clientGone(reply)
    const generation = router.route(chat, { signal, ptnID: ptnOf(request.headers['x-ptn-id'], request.body.ptn), requester: keyedRequester(requesterOf(request.principal), request.body.prompt_cache_key) }) as RoutedGeneration<ChatEvent>
    const id = `chatcmpl-${randomUUID()}`
    const created = Math.floor(Date.now() / 1000)
    const model = request.body.model

    if (request.body.stream !== true) {
      const answer = assemble(await collectAnswer(generation, signal, reply, () => { onServed?.(chat.modelID) }))
      return {
        id,
        object: 'chat.completion' as const,
        created,
        model,
        system_fingerprint: null,
        choices: [{
          index: 0,
          message: {
            role: 'assistant' as const,
            // OpenAI's shape: content null when the answer is only tool calls
            content: answer.text === '' && answer.toolCalls.length > 0 ? null : answer.text,
            refusal: null,
            ...(answer.toolCalls.length > 0 ? { tool_calls: answer.toolCalls } : {}),
            ...(answer.reasoning === '' ? {} : { reasoning_content: answer.reasoning, reasoning: answer.reasoning })
          },
          logprobs: null,
          finish_reason: answer.done.finishReason
        }],
        usage: toUsage(answer.done.usage)
      }
    }

    const includeUsage = request.body.stream_options?.include_usage === true
    const chunk = (delta: ChatCompletionChunk['choices'][0]['delta'], finishReason: ChatCompletionChunk['choices'][0]['finish_reason'] = null): ChatCompletionChunk => ({
      id,
      object: 'chat.completion.chunk',
      created,
      model,
      system_fingerprint: null,
      choices: [{ index: 0, delta, logprobs: null, finish_reason: finishReason }],
      ...(includeUsage ? { usage: null } : {})
    })
    const served = await streamGeneration(reply, generation, {
      signal,
      opening: [chunk({ role: 'assistant', content: '' })],
      render: (event) => {
        switch (event.type) {
          case 'delta': return event.text === '' ? [] : [chunk({ content: event.text })]
          case 'reasoning': return event.text === '' ? [] : [chunk({ reasoning_content: event.text, reasoning: event.text })]
          // OpenAI's stream: the first delta of a call carries its index, id, type and name; later ones fragments
          case 'tool_call': return [chunk({ tool_calls: [{ index: event.index, id: event.id, type: 'function', function: { name: event.name, arguments: '' } }] })]
          case 'tool_arguments': return [chunk({ tool_calls: [{ index: event.index, function: { arguments: event.text } }] })]
          case 'done': return [
            chunk({}, event.finishReason),
            ...(includeUsage ? [{ ...chunk({}), choices: [], usage: toUsage(event.usage) }] : [])
          ]
        }
      }
    })
    if (served) onServed?.(chat.modelID)
    return reply
  })
}

/** The header wins over the body's `ptn` (meshnode's extension). */
export function ptnOf (header: string | string[] | undefined, body: string | null | undefined): string | null {
  return (typeof header === 'string' && header !== '' ? header : null) ?? body ?? null
}

export function toUsage (usage: ChatUsage): Usage {
  return {
    prompt_tokens: usage.promptTokens,
    completion_tokens: usage.completionTokens,
    total_tokens: usage.totalTokens,
    prompt_tokens_details: { cached_tokens: usage.cachedTokens }
  }
}

/** A whole answer from its events: the text, the tool calls with their arguments joined, and how it ended. */
function assemble (events: ChatEvent[]): { text: string, reasoning: string, toolCalls: ToolCallOut[], done: DoneEvent } {
  let text = ''
  let reasoning = ''
  const toolCalls: ToolCallOut[] = []
  let done: DoneEvent | null = null
  for (const event of events) {
    if (event.type === 'delta') text += event.text
    else if (event.type === 'reasoning') reasoning += event.text
    else if (event.type === 'tool_call') toolCalls[event.index] = { id: event.id, type: 'function', function: { name: event.name, arguments: '' } }
    else if (event.type === 'tool_arguments') {
      const call = toolCalls[event.index]
      if (call == null) throw new Error(`arguments for tool call ${event.index}, which never started`)
      call.function.arguments += event.text
    } else done = event
  }
  if (done == null) throw new Error('generation ended without a final event')
  return { text, reasoning, toolCalls, done }
}

/** Maps the OpenAI request onto our engine's request, refusing what we cannot honour by name (never dropping it). */
export function toChatRequest (body: ChatCompletionRequest): RoutedRequest & { kind: 'chat' } {
  if (body.n != null && body.n > 1) throw new InvalidInputError('n > 1 is not supported: this node returns one choice per request', 'n')
  if (body.logprobs === true) throw new InvalidInputError('logprobs is not supported', 'logprobs')
  if (body.top_logprobs != null && body.top_logprobs > 0) throw new InvalidInputError('top_logprobs is not supported', 'top_logprobs')
  if (body.functions != null && body.functions.length > 0) throw new InvalidInputError('functions (the legacy form of function calling) is not supported: send tools', 'functions')
  if (body.function_call != null) throw new InvalidInputError('function_call (the legacy form of tool_choice) is not supported: send tool_choice', 'function_call')

  const messages: ChatMessage[] = body.messages.map((message, i): ChatMessage => {
    const content = messageText(message.content, i)
    switch (message.role) {
      case 'function': throw new InvalidInputError(`messages[${i}]: role function (the legacy form of tool) is not supported: send role tool`, `messages.${i}.role`)
      case 'tool': return { role: 'tool', content, toolCallID: message.tool_call_id ?? null }
      case 'assistant': return {
        role: 'assistant',
        content,
        reasoning: message.reasoning_content ?? message.reasoning ?? null,
        toolCalls: message.tool_calls?.map((call, c) => ({
          id: call.id, name: call.function.name, arguments: boundedJsonText(call.function.arguments, `messages.${i}.tool_calls.${c}.function.arguments`)
        })) ?? null
      }
      case 'developer': return { role: 'system', content }
      default: return { role: message.role, content }
    }
  })
  const tools = (body.tools ?? []).map((tool, i) => {
    if (tool.type !== 'function' || tool.function == null) {
      throw new InvalidInputError(`tools[${i}]: only tools of type function are supported`, `tools.${i}.type`)
    }
    return { name: tool.function.name, description: tool.function.description ?? null, parameters: tool.function.parameters ?? null }
  })
  const choice = body.tool_choice
  const toolChoice: ToolChoice | null = choice == null ? null : typeof choice === 'string' ? choice : { name: choice.function.name }
  const format = body.response_format
  return {
    kind: 'chat',
    modelID: body.model,
    messages,
    ...toSampling(body),
    maxTokens: body.max_completion_tokens ?? body.max_tokens ?? null,
    responseFormat: format == null ? null : format.type === 'json_schema' ? { type: 'json_schema', schema: format.json_schema.schema } : format,
    tools,
    toolChoice,
    parallelToolCalls: body.parallel_tool_calls ?? null,
    thoughtTokens: body.reasoning_effort == null ? null : THOUGHT_TOKENS_BY_EFFORT[body.reasoning_effort]
  }
}

/**
 * A call's arguments sent back in a conversation, which the engine reads as JSON: refused naming `param` when that
 * JSON nests deeper than MAX_JSON_DEPTH (no model's call nests so; a tool's result may, and is read as plain text
 * then); any other text is left to the engine.
 */
export function boundedJsonText (text: string, param: string): string {
  if (jsonTextDepthExceeds(text)) throw new InvalidInputError(`${param}: JSON ${nestedTooDeep()}`, param)
  return text
}

/** The sampling parameters chat and text completions share, in the engine's terms. */
export function toSampling (body: ChatCompletionRequest | CompletionRequest): SamplingRequest {
  return {
    maxTokens: body.max_tokens ?? null,
    temperature: body.temperature ?? null,
    topP: body.top_p ?? null,
    topK: body.top_k ?? null,
    stop: body.stop == null ? null : typeof body.stop === 'string' ? [body.stop] : body.stop,
    seed: body.seed ?? null,
    presencePenalty: body.presence_penalty ?? null,
    frequencyPenalty: body.frequency_penalty ?? null,
    logitBias: body.logit_bias ?? null
  }
}

/** Parts a model that reads text only is shown as a placeholder, by type: what the placeholder names. */
const MEDIA_PARTS = new Map([['image_url', 'image'], ['input_audio', 'audio'], ['file', 'file']])

function messageText (content: ChatCompletionRequest['messages'][number]['content'], index: number): string {
  if (content == null) return ''
  if (typeof content === 'string') return content
  return content.map((part, p) => {
    if (part.type === 'text' && typeof part.text === 'string') return part.text
    // Refusing it would end the session: an agent sends its history, the image included, with every later turn
    const media = MEDIA_PARTS.get(part.type)
    if (media != null) {
      const file = (part as { file?: { filename?: unknown } }).file
      const name = typeof file?.filename === 'string' && file.filename !== '' ? ` ${file.filename}` : ''
      return `[${media}${name} omitted: this model reads text only]`
    }
    throw new InvalidInputError(`messages[${index}].content[${p}]: content parts of type ${part.type} are not supported (text, image_url, input_audio and file are)`, `messages.${index}.content.${p}.type`)
  }).join('\n')
}
