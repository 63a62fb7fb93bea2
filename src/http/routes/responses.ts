// OpenAI's Responses API (what Codex, the OpenAI Agents SDK and `openai.responses.create` speak): a translator between
// its shapes and the one internal chat request and its events, and the kept responses `previous_response_id`
// continues. Routing, the serving policy, the prefix cache, billing, peers and limits are the chat route's, unchanged.
import { randomUUID } from 'node:crypto'
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod'
import { InvalidInputError, NotFoundError } from '../../errors.ts'
import { MAX_TOOL_DESCRIPTION_CHARS, type ChatEvent, type ChatMessage, type ChatRouter, type ChatUsage, type DoneEvent, type RoutedGeneration, type RoutedRequest, type ToolChoice, type ToolDefinition } from '../../inference/index.ts'
import type { StoredResponses } from '../../responses/index.ts'
import type { ErrorEnvelope } from '../errors.ts'
import { collectAnswer, NamedEvent, streamGeneration, type StreamDialect } from '../generation-stream.ts'
import { requesterOf } from '../guards.ts'
import { errorResponses } from '../schemas/common.ts'
import {
  DeletedResponse, ResponseObject, ResponseParams, ResponsesRequest, type OutputItem, type ResponsesInputItem, type ResponseUsage
} from '../schemas/responses.ts'
import { clientGone } from '../sse.ts'
import { ptnOf } from './chat.ts'
import { IGNORED_TOOLS_HEADER } from './messages.ts'
import { THOUGHT_TOKENS_BY_EFFORT } from '../schemas/openai.ts'

export interface ResponsesRoutesOptions {
  router: ChatRouter
  /** Where responses made with `store` (the default) are kept, for GET, DELETE and `previous_response_id`. */
  responses: StoredResponses
  onServed?: (modelID: string) => void
}

/** Content parts that carry what this node cannot read yet (no vision, no audio): refused by name. */
const MEDIA_PARTS = new Set(['input_image', 'input_file', 'input_audio'])

export const responsesRoutes: FastifyPluginAsyncZod<ResponsesRoutesOptions> = async (app, { router, responses, onServed }) => {
  app.post('/v1/responses', {
    schema: { summary: 'Create a response, streamed or not (OpenAI Responses)', tags: ['openai'], body: ResponsesRequest, response: { 200: ResponseObject, ...errorResponses } }
  }, async (request, reply) => {
    const body = request.body
    const requester = requesterOf(request.principal)
    const previous = body.previous_response_id == null ? null : continued(responses, body.previous_response_id, requester)
    const plan = toChatRequest(body, previous ?? [])
    if (plan.ignoredTools.length > 0) {
      void reply.header(IGNORED_TOOLS_HEADER, plan.ignoredTools.join(', '))
      request.log.info({ tools: plan.ignoredTools }, 'tools of kinds that cannot run here were left out of the prompt')
    }
    const signal = clientGone(reply)
    const generation = inClientTerms(
      router.route(plan.chat, { signal, ptnID: ptnOf(request.headers['x-ptn-id'], body.ptn), requester }) as RoutedGeneration<ChatEvent>,
      plan
    )
    const answer = new ResponseAnswer(echo(body))
    const keep = (response: ResponseObject): void => {
      if (!response.store) return
      const conversation = [...plan.conversation, answer.message()]
      response.store = responses.save({ id: response.id, requester, conversation, answer: response })
      if (!response.store) request.log.info({ response: response.id }, 'response too large to keep; answered without storing it')
    }

    if (body.stream !== true) {
      for (const event of await collectAnswer(generation, signal, reply, () => { onServed?.(plan.chat.modelID) })) {
        if (event.type === 'done') answer.finish(event)
        else answer.add(event)
      }
      keep(answer.response)
      return answer.response
    }

    const dialect: StreamDialect = { done: null, failure: (envelope) => answer.failed(envelope) }
    const served = await streamGeneration(reply, generation, {
      signal,
      dialect,
      opening: answer.opening(),
      render: (event) => {
        if (event.type !== 'done') return answer.add(event)
        const closing = answer.finish(event)
        keep(answer.response)
        return [...closing, answer.ended()]
      }
    })
    if (served) onServed?.(plan.chat.modelID)
    return reply
  })

  app.get('/v1/responses/:id', {
    schema: { summary: 'A kept response (OpenAI Responses)', tags: ['openai'], params: ResponseParams, response: { 200: ResponseObject, ...errorResponses } }
  }, async (request) => responses.get(request.params.id, requesterOf(request.principal)).answer as ResponseObject)

  app.delete('/v1/responses/:id', {
    schema: { summary: 'Delete a kept response (OpenAI Responses)', tags: ['openai'], params: ResponseParams, response: { 200: DeletedResponse, ...errorResponses } }
  }, async (request) => {
    responses.delete(request.params.id, requesterOf(request.principal))
    return { id: request.params.id, object: 'response' as const, deleted: true as const }
  })
}

/** The conversation a kept response ended, to continue; a 404 naming the id when there is none for this requester. */
function continued (responses: StoredResponses, id: string, requester: string): ChatMessage[] {
  try {
    return responses.get(id, requester).conversation
  } catch (err) {
    // Unknown, expired, deleted, stored with store:false, or another key's: all the same answer, which leaks nothing
    if (err instanceof NotFoundError) throw new NotFoundError(`previous_response_id ${id} names no kept response: it never existed, was deleted, expired, was made with store: false or with another API key`)
    throw err
  }
}

/** The request as the engine's chat request, and what the route needs to answer it and to speak of it. */
interface ChatPlan {
  chat: RoutedRequest & { kind: 'chat' }
  /** The conversation to keep: what `previous_response_id` gave, then this input; never the instructions. */
  conversation: ChatMessage[]
  /** The tools left out of the prompt, as `type` or `type:name`. */
  ignoredTools: string[]
  /** For each chat message, the request field it came from (`instructions`, `previous_response_id`, `input.3`). */
  origins: string[]
  /** For each tool given to the engine, its index in the request's `tools`. */
  toolIndexes: number[]
}

/** Maps the Responses request onto our chat request; tools of kinds other than function are left out, by name. */
export function toChatRequest (body: ResponsesRequest, previous: ChatMessage[]): ChatPlan {
  if (body.background === true) throw new InvalidInputError('background responses are not supported: send the request and read its answer', 'background')
  if (body.conversation != null) throw new InvalidInputError('conversation (the Conversations API) is not supported: continue with previous_response_id, or send the history as input', 'conversation')
  if (body.prompt != null) throw new InvalidInputError('prompt templates are not supported: send instructions and input', 'prompt')
  if (body.top_logprobs != null && body.top_logprobs > 0) throw new InvalidInputError('top_logprobs is not supported', 'top_logprobs')

  const input = toMessages(typeof body.input === 'string' ? [{ role: 'user', content: body.input }] : body.input ?? [])
  const conversation = [...previous, ...input.messages]
  const messages: ChatMessage[] = body.instructions == null || body.instructions === '' ? [] : [{ role: 'system', content: body.instructions }]
  const origins = messages.map(() => 'instructions')
  origins.push(...previous.map(() => 'previous_response_id'), ...input.origins)
  messages.push(...conversation)
  if (messages.length === 0) throw new InvalidInputError('input must hold at least one message (or previous_response_id name a response to continue)', 'input')

  const tools: ToolDefinition[] = []
  const toolIndexes: number[] = []
  const ignoredTools: string[] = []
  ;(body.tools ?? []).forEach((tool, i) => {
    if (tool.type !== 'function') {
      ignoredTools.push(tool.name == null ? tool.type : `${tool.type}:${tool.name}`)
      return
    }
    if (tool.name == null || tool.name === '') throw new InvalidInputError(`tools[${i}]: a function tool needs a name`, `tools.${i}.name`)
    if (tool.description != null && tool.description.length > MAX_TOOL_DESCRIPTION_CHARS) {
      throw new InvalidInputError(`tools[${i}].description is longer than ${MAX_TOOL_DESCRIPTION_CHARS} characters`, `tools.${i}.description`)
    }
    tools.push({ name: tool.name, description: tool.description ?? null, parameters: tool.parameters ?? null })
    toolIndexes.push(i)
  })
  let toolChoice = toToolChoice(body.tool_choice)
  if (toolChoice != null && typeof toolChoice === 'object' && 'allowed' in toolChoice) {
    // allowed_tools: the model sees only those, and mode says whether it must call one
    const allowed = toolChoice.allowed
    for (let i = tools.length - 1; i >= 0; i--) {
      if (!allowed.has(tools[i].name)) {
        tools.splice(i, 1)
        toolIndexes.splice(i, 1)
      }
    }
    toolChoice = toolChoice.mode
  }
  const format = body.text?.format
  return {
    chat: {
      kind: 'chat',
      modelID: body.model,
      messages,
      maxTokens: body.max_output_tokens ?? null,
      temperature: body.temperature ?? null,
      topP: body.top_p ?? null,
      responseFormat: format == null ? null : format.type === 'json_schema' ? { type: 'json_schema', schema: format.schema } : { type: format.type },
      tools,
      // `auto` over tools that were all left out is no tool at all (Codex sends auto with every request)
      toolChoice: tools.length === 0 && toolChoice === 'auto' ? null : toolChoice,
      parallelToolCalls: body.parallel_tool_calls ?? null,
      thoughtTokens: body.reasoning?.effort == null ? null : THOUGHT_TOKENS_BY_EFFORT[body.reasoning.effort]
    },
    conversation,
    ignoredTools,
    origins,
    toolIndexes
  }
}

function toToolChoice (choice: ResponsesRequest['tool_choice']): ToolChoice | { allowed: Set<string>, mode: 'auto' | 'required' } | null {
  if (choice == null || typeof choice === 'string') return choice ?? null
  if (choice.type === 'function') {
    if (choice.name == null) throw new InvalidInputError('tool_choice of type function needs the function\'s name', 'tool_choice.name')
    return { name: choice.name }
  }
  if (choice.type === 'allowed_tools') {
    if (choice.mode == null || choice.tools == null) throw new InvalidInputError('tool_choice of type allowed_tools needs mode and tools', 'tool_choice')
    return { allowed: new Set(choice.tools.flatMap((tool) => tool.type === 'function' && tool.name != null ? [tool.name] : [])), mode: choice.mode }
  }
  throw new InvalidInputError(`tool_choice forces a tool of type ${choice.type}, which cannot run here (only function tools do)`, 'tool_choice.type')
}

/**
 * Input items as chat messages, each with the item it came from. A function_call joins the assistant message before
 * it (the calls of one answer are one message), and a function_call_output is the tool message that answers it.
 */
function toMessages (items: ReadonlyArray<ResponsesInputItem | { role: 'user', content: string }>): { messages: ChatMessage[], origins: string[] } {
  const messages: ChatMessage[] = []
  const origins: string[] = []
  items.forEach((item, i) => {
    const at = `input.${i}`
    const type = 'type' in item && item.type != null ? item.type : item.role != null ? 'message' : null
    switch (type) {
      case 'message': {
        if (item.role == null) throw new InvalidInputError(`${at}: a message item needs a role`, `${at}.role`)
        const content = textOf(item.content ?? '', `${at}.content`)
        messages.push(item.role === 'assistant' ? { role: 'assistant', content, toolCalls: null } : { role: item.role === 'user' ? 'user' : 'system', content })
        origins.push(at)
        return
      }
      case 'function_call': {
        const call = { id: stringField(item, 'call_id', at), name: stringField(item, 'name', at), arguments: stringField(item, 'arguments', at) }
        const last = messages.at(-1)
        if (last?.role === 'assistant') {
          last.toolCalls = [...(last.toolCalls ?? []), call]
        } else {
          messages.push({ role: 'assistant', content: '', toolCalls: [call] })
          origins.push(at)
        }
        return
      }
      case 'function_call_output': {
        const output = 'output' in item ? item.output : undefined
        if (output == null) throw new InvalidInputError(`${at}.output must be a string or input_text parts`, `${at}.output`)
        messages.push({ role: 'tool', content: textOf(output, `${at}.output`), toolCallID: stringField(item, 'call_id', at) })
        origins.push(at)
        return
      }
      // The model's thoughts of an earlier turn, sent back with the history: not part of what it answered
      case 'reasoning':
        return
      case null:
        throw new InvalidInputError(`${at}: an input item needs a type (or a role, for a message)`, `${at}.type`)
      default:
        throw new InvalidInputError(`${at}: input items of type ${type} are not supported (message, function_call, function_call_output and reasoning are)`, `${at}.type`)
    }
  })
  return { messages, origins }
}

function textOf (content: string | ReadonlyArray<{ type: string, text?: unknown, refusal?: unknown }>, at: string): string {
  if (typeof content === 'string') return content
  return content.map((part, p) => {
    const where = `${at}.${p}`
    if ((part.type === 'input_text' || part.type === 'output_text') && typeof part.text === 'string') return part.text
    if (part.type === 'refusal' && typeof part.refusal === 'string') return part.refusal
    if (MEDIA_PARTS.has(part.type)) throw new InvalidInputError(`${where}: ${part.type} parts are not supported (this node has no vision or audio yet); send text`, `${where}.type`)
    if (part.type === 'input_text' || part.type === 'output_text') throw new InvalidInputError(`${where}.text must be a string`, `${where}.text`)
    throw new InvalidInputError(`${where}: content parts of type ${part.type} are not supported (input_text and output_text are)`, `${where}.type`)
  }).join('\n')
}

function stringField (item: object, field: string, at: string): string {
  const value = (item as Record<string, unknown>)[field]
  if (typeof value !== 'string' || value === '') throw new InvalidInputError(`${at}.${field} must be a non-empty string`, `${at}.${field}`)
  return value
}

/**
 * The engine names a field of the chat request it refused (`maxTokens`, `tools.2.function.parameters.…`,
 * `messages.4.tool_calls.0`); the client sent the Responses request, so the refusal names the field there.
 */
function inClientTerms (generation: RoutedGeneration<ChatEvent>, plan: ChatPlan): RoutedGeneration<ChatEvent> {
  const events = generation.events
  return {
    get servedBy () { return generation.servedBy },
    events: {
      next: async () => {
        try {
          return await events.next()
        } catch (err) {
          throw clientTermsOf(err, plan)
        }
      },
      return: async (value?: unknown) => await events.return?.(value) ?? { done: true, value: undefined }
    }
  }
}

function clientTermsOf (err: unknown, plan: ChatPlan): unknown {
  if (!(err instanceof InvalidInputError) || err.param == null) return err
  const [field, index, ...rest] = err.param.split('.')
  let param: string | null = null
  if (field === 'maxTokens') param = 'max_output_tokens'
  else if (field === 'topP') param = 'top_p'
  else if (field === 'responseFormat') param = ['text.format', ...(index === 'json_schema' ? rest : [index, ...rest].filter((part) => part != null))].join('.')
  else if (field === 'messages') param = plan.origins[Number(index)] ?? 'input'
  else if (field === 'tools' && index != null && /^\d+$/.test(index)) {
    // tools.<i>.function.<x> in the chat request's shape is tools.<j>.<x> in the request's own
    const original = plan.toolIndexes[Number(index)] ?? Number(index)
    param = [`tools.${original}`, ...(rest[0] === 'function' ? rest.slice(1) : rest)].join('.')
  }
  if (param == null || param === err.param) return err
  // "The messages take 5000 tokens" reads right as it is; a path in the message is the client's path
  const message = (field === 'messages' && index == null ? err.message : err.message.replaceAll(err.param, param)).replaceAll('response_format', 'text.format')
  return new InvalidInputError(message, param)
}

/** The Responses request's fields a response object repeats, as the client gave them (with OpenAI's defaults). */
function echo (body: ResponsesRequest): ResponseObject {
  return {
    id: `resp_${randomUUID().replaceAll('-', '')}`,
    object: 'response',
    created_at: Math.floor(Date.now() / 1000),
    status: 'in_progress',
    error: null,
    incomplete_details: null,
    instructions: body.instructions ?? null,
    model: body.model,
    output: [],
    output_text: '',
    parallel_tool_calls: body.parallel_tool_calls ?? true,
    tool_choice: body.tool_choice ?? 'auto',
    tools: body.tools ?? [],
    temperature: body.temperature ?? 1,
    top_p: body.top_p ?? 1,
    max_output_tokens: body.max_output_tokens ?? null,
    previous_response_id: body.previous_response_id ?? null,
    store: body.store ?? true,
    metadata: body.metadata ?? {},
    text: { format: body.text?.format ?? { type: 'text' } },
    reasoning: { effort: body.reasoning?.effort ?? null, summary: body.reasoning?.summary ?? null },
    truncation: 'disabled',
    usage: null
  }
}

type MessageItem = Extract<OutputItem, { type: 'message' }>
type CallItem = Extract<OutputItem, { type: 'function_call' }>
type ReasoningItem = Extract<OutputItem, { type: 'reasoning' }>
type OpenItem = { item: MessageItem, index: number } | { item: CallItem, index: number } | { item: ReasoningItem, index: number }

/**
 * One response built from the generation's events, as the stream tells it and as the whole object answers it: an
 * output item per run of text (a message) and per tool call, each opened, filled and closed in the order the model
 * made them. The non-streamed answer is the same object the stream's last event carries.
 */
class ResponseAnswer {
  readonly response: ResponseObject
  #sequence = 0
  #open: OpenItem | null = null
  /** The calls by the engine's call index. */
  readonly #calls = new Map<number, { item: CallItem, index: number }>()
  readonly #text: string[] = []

  constructor (response: ResponseObject) {
    this.response = response
  }

  opening (): NamedEvent[] {
    return [this.#lifecycle('response.created'), this.#lifecycle('response.in_progress')]
  }

  /** The stream events one generation event (other than `done`) becomes. */
  add (event: Exclude<ChatEvent, DoneEvent>): NamedEvent[] {
    switch (event.type) {
      case 'delta': {
        if (event.text === '') return []
        const events = this.#open?.item.type === 'message' ? [] : this.#start(this.#item({ type: 'message', id: `msg_${hex()}`, status: 'in_progress', role: 'assistant', content: [] }))
        const open = this.#open as { item: MessageItem, index: number }
        if (open.item.content.length === 0) {
          open.item.content.push({ type: 'output_text', text: '', annotations: [] })
          events.push(this.#event('response.content_part.added', { item_id: open.item.id, output_index: open.index, content_index: 0, part: { type: 'output_text', text: '', annotations: [] } }))
        }
        open.item.content[0].text += event.text
        this.#text.push(event.text)
        events.push(this.#event('response.output_text.delta', { item_id: open.item.id, output_index: open.index, content_index: 0, delta: event.text, logprobs: [] }))
        return events
      }
      case 'reasoning': {
        if (event.text === '') return []
        const events = this.#open?.item.type === 'reasoning' ? [] : this.#start(this.#item({ type: 'reasoning', id: `rs_${hex()}`, status: 'in_progress', summary: [], content: [{ type: 'reasoning_text', text: '' }] }))
        const open = this.#open as { item: ReasoningItem, index: number }
        open.item.content[0].text += event.text
        events.push(this.#event('response.reasoning_text.delta', { item_id: open.item.id, output_index: open.index, content_index: 0, delta: event.text }))
        return events
      }
      case 'tool_call': {
        const events = this.#start(this.#item({ type: 'function_call', id: `fc_${hex()}`, call_id: event.id, name: event.name, arguments: '', status: 'in_progress' }))
        this.#calls.set(event.index, this.#open as { item: CallItem, index: number })
        return events
      }
      case 'tool_arguments': {
        const call = this.#calls.get(event.index)
        if (call == null) throw new Error(`arguments for tool call ${event.index}, which never started`)
        call.item.arguments += event.text
        return [this.#event('response.function_call_arguments.delta', { item_id: call.item.id, output_index: call.index, delta: event.text })]
      }
    }
  }

  /** Closes the answer: its last item, its status and usage. The stream's closing events; `ended()` follows them. */
  finish (done: DoneEvent): NamedEvent[] {
    const cut = done.finishReason === 'length'
    const events = this.#close(cut ? 'incomplete' : 'completed')
    Object.assign(this.response, {
      status: cut ? 'incomplete' : 'completed',
      incomplete_details: cut ? { reason: 'max_output_tokens' } : null,
      output_text: this.#text.join(''),
      usage: toUsage(done.usage)
    })
    return events
  }

  /** The stream's last event: the whole response, completed or incomplete. */
  ended (): NamedEvent {
    return this.#lifecycle(this.response.status === 'incomplete' ? 'response.incomplete' : 'response.completed')
  }

  /** A failure after the stream opened: the response as far as it got, failed, with the error. Nothing is kept. */
  failed (envelope: ErrorEnvelope): NamedEvent {
    // The item being made stays as far as it got, without events of its own: the failure is the stream's last word
    if (this.#open != null) this.#open.item.status = 'incomplete'
    this.#open = null
    Object.assign(this.response, { status: 'failed', store: false, output_text: this.#text.join(''), error: { code: errorCode(envelope), message: envelope.error.message } })
    return this.#lifecycle('response.failed')
  }

  /** The answer as the assistant message a continuation starts from. */
  message (): ChatMessage {
    const calls = this.response.output.flatMap((item) => item.type === 'function_call' ? [{ id: item.call_id, name: item.name, arguments: item.arguments }] : [])
    return { role: 'assistant', content: this.#text.join(''), toolCalls: calls.length > 0 ? calls : null }
  }

  #item<T extends OutputItem> (item: T): { item: T, index: number } {
    this.response.output.push(item)
    return { item, index: this.response.output.length - 1 }
  }

  #start (opened: OpenItem): NamedEvent[] {
    const events = this.#close('completed')
    this.#open = opened
    // The item as it was when added: later events fill it in, and the stream's reader must not see them twice
    events.push(this.#event('response.output_item.added', { output_index: opened.index, item: structuredClone(opened.item) }))
    return events
  }

  #close (status: 'completed' | 'incomplete'): NamedEvent[] {
    const open = this.#open
    if (open == null) return []
    this.#open = null
    open.item.status = status
    const events: NamedEvent[] = []
    if (open.item.type === 'message') {
      const part = open.item.content[0]
      events.push(
        this.#event('response.output_text.done', { item_id: open.item.id, output_index: open.index, content_index: 0, text: part.text, logprobs: [] }),
        this.#event('response.content_part.done', { item_id: open.item.id, output_index: open.index, content_index: 0, part: structuredClone(part) })
      )
    } else if (open.item.type === 'reasoning') {
      events.push(this.#event('response.reasoning_text.done', { item_id: open.item.id, output_index: open.index, content_index: 0, text: open.item.content[0].text }))
    } else {
      events.push(this.#event('response.function_call_arguments.done', { item_id: open.item.id, output_index: open.index, name: open.item.name, arguments: open.item.arguments }))
    }
    events.push(this.#event('response.output_item.done', { output_index: open.index, item: structuredClone(open.item) }))
    return events
  }

  #lifecycle (type: string): NamedEvent {
    return this.#event(type, { response: structuredClone(this.response) })
  }

  #event (type: string, fields: object): NamedEvent {
    return new NamedEvent(type, { type, sequence_number: this.#sequence++, ...fields })
  }
}

function toUsage (usage: ChatUsage): ResponseUsage {
  return {
    input_tokens: usage.promptTokens,
    input_tokens_details: { cached_tokens: usage.cachedTokens },
    output_tokens: usage.completionTokens,
    output_tokens_details: { reasoning_tokens: 0 },
    total_tokens: usage.totalTokens
  }
}

/** OpenAI's codes for a failed response, from our error type. */
function errorCode (envelope: ErrorEnvelope): string {
  if (envelope.error.type === 'rate_limit_error') return 'rate_limit_exceeded'
  if (envelope.error.type === 'invalid_request_error') return 'invalid_prompt'
  return 'server_error'
}

function hex (): string {
  return randomUUID().replaceAll('-', '')
}
