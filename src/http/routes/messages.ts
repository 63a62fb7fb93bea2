// Anthropic's Messages API (what Claude Code and the Anthropic SDK speak): a translator between its shapes and the one
// internal chat request and its events. Routing, the serving policy, the prefix cache, billing, peers and limits are
// the OpenAI chat route's, unchanged.
import { randomUUID } from 'node:crypto'
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod'
import { InvalidInputError } from '../../errors.ts'
import type { ChatEvent, ChatMessage, ChatRouter, ChatUsage, DoneEvent, LocalRouter, RoutedGeneration, RoutedRequest, ToolChoice, ToolDefinition } from '../../inference/index.ts'
import { keyedRequester } from '../../inference/index.ts'
import { anthropicError } from '../errors.ts'
import { collectAnswer, NamedEvent, streamGeneration } from '../generation-stream.ts'
import { requesterOf } from '../guards.ts'
import { anthropicErrorResponses, CountTokensRequest, CountTokensResult, MessageOut, MessagesRequest, type Usage } from '../schemas/anthropic.ts'
import { clientGone } from '../sse.ts'
import { ptnOf } from './chat.ts'

export interface MessagesRoutesOptions {
  router: ChatRouter
  /** Counts a request's input tokens on the model it names (this node's). */
  counter?: Pick<LocalRouter, 'countChatTokens'>
  onServed?: (modelID: string) => void
}

/** Tool kinds the client runs itself, which become the model's functions; any other kind is a server tool of Anthropic's. */
const CLIENT_TOOL_TYPES = new Set([undefined, null, 'custom'])
/** The response header that names the tools left out of the prompt (server tools, which cannot run here). */
export const IGNORED_TOOLS_HEADER = 'x-meshnode-ignored-tools'

export const messagesRoutes: FastifyPluginAsyncZod<MessagesRoutesOptions> = async (app, { router, counter, onServed }) => {
  const config = { errorShape: 'anthropic' as const }

  app.post('/v1/messages', {
    config,
    schema: { summary: 'Create a message, streamed or not (Anthropic Messages)', tags: ['anthropic'], body: MessagesRequest, response: { 200: MessageOut, ...anthropicErrorResponses } }
  }, async (request, reply) => {
    const { chat, ignoredTools } = toChatRequest(request.body)
    if (ignoredTools.length > 0) {
      void reply.header(IGNORED_TOOLS_HEADER, ignoredTools.join(', '))
      request.log.info({ tools: ignoredTools }, 'tools of kinds that cannot run here were left out of the prompt')
    }
    const signal = clientGone(reply)
    const generation = router.route(chat, { signal, ptnID: ptnOf(request.headers['x-ptn-id'], request.body.ptn), requester: keyedRequester(requesterOf(request.principal), request.body.metadata?.user_id) }) as RoutedGeneration<ChatEvent>
    const id = `msg_${randomUUID().replaceAll('-', '')}`
    const model = request.body.model

    if (request.body.stream !== true) {
      const answer = assemble(await collectAnswer(generation, signal, reply, () => { onServed?.(chat.modelID) }))
      return {
        id,
        type: 'message' as const,
        role: 'assistant' as const,
        model,
        content: answer.content,
        stop_reason: stopReason(answer.done),
        stop_sequence: answer.done.stopSequence ?? null,
        usage: toUsage(answer.done.usage)
      }
    }

    // Anthropic's event order: message_start, then each content block (start, deltas, stop), message_delta with the
    // stop reason and the output tokens, message_stop. A text block is opened at the first text.
    let block = -1
    let open: 'thinking' | 'text' | 'tool_use' | null = null
    const close = (): unknown[] => {
      if (open == null) return []
      open = null
      return [new NamedEvent('content_block_stop', { type: 'content_block_stop', index: block })]
    }
    const start = (kind: 'thinking' | 'text' | 'tool_use', contentBlock: object): unknown[] => {
      const events = close()
      block++
      open = kind
      events.push(new NamedEvent('content_block_start', { type: 'content_block_start', index: block, content_block: contentBlock }))
      return events
    }
    const served = await streamGeneration(reply, generation, {
      signal,
      dialect: { done: null, failure: (envelope) => new NamedEvent('error', anthropicError(envelope, request.id)) },
      opening: [
        new NamedEvent('message_start', {
          type: 'message_start',
          message: { id, type: 'message', role: 'assistant', model, content: [], stop_reason: null, stop_sequence: null, usage: toUsage({ promptTokens: 0, completionTokens: 0, totalTokens: 0, cachedTokens: 0 }) }
        }),
        new NamedEvent('ping', { type: 'ping' })
      ],
      render: (event) => {
        switch (event.type) {
          case 'delta': {
            if (event.text === '') return []
            const events = open === 'text' ? [] : start('text', { type: 'text', text: '' })
            events.push(new NamedEvent('content_block_delta', { type: 'content_block_delta', index: block, delta: { type: 'text_delta', text: event.text } }))
            return events
          }
          case 'reasoning': {
            if (event.text === '') return []
            const events = open === 'thinking' ? [] : start('thinking', { type: 'thinking', thinking: '', signature: '' })
            events.push(new NamedEvent('content_block_delta', { type: 'content_block_delta', index: block, delta: { type: 'thinking_delta', thinking: event.text } }))
            return events
          }
          case 'tool_call': return start('tool_use', { type: 'tool_use', id: event.id, name: event.name, input: {} })
          case 'tool_arguments': return [new NamedEvent('content_block_delta', { type: 'content_block_delta', index: block, delta: { type: 'input_json_delta', partial_json: event.text } })]
          case 'done': return [
            ...close(),
            new NamedEvent('message_delta', {
              type: 'message_delta',
              delta: { stop_reason: stopReason(event), stop_sequence: event.stopSequence ?? null },
              usage: toUsage(event.usage)
            }),
            new NamedEvent('message_stop', { type: 'message_stop' })
          ]
        }
      }
    })
    if (served) onServed?.(chat.modelID)
    return reply
  })

  app.post('/v1/messages/count_tokens', {
    config,
    schema: { summary: 'Count a message request\'s input tokens (Anthropic Messages)', tags: ['anthropic'], body: CountTokensRequest, response: { 200: CountTokensResult, ...anthropicErrorResponses } }
  }, async (request, reply) => {
    if (counter == null) throw new InvalidInputError('count_tokens needs the model on this node', 'model')
    const { chat } = toChatRequest({ ...request.body, max_tokens: request.body.max_tokens ?? 1 })
    return { input_tokens: await counter.countChatTokens(chat, { signal: clientGone(reply) }) }
  })
}

/** Maps the Anthropic request onto our chat request; tools of Anthropic's server kinds are left out, by name. */
export function toChatRequest (body: MessagesRequest): { chat: RoutedRequest & { kind: 'chat' }, ignoredTools: string[] } {
  const messages: ChatMessage[] = []
  if (body.system != null) {
    const system = typeof body.system === 'string' ? body.system : textOf(body.system, 'system')
    if (system !== '') messages.push({ role: 'system', content: system })
  }
  body.messages.forEach((message, i) => {
    const at = `messages.${i}.content`
    if (typeof message.content === 'string') {
      messages.push({ role: message.role, content: message.content })
      return
    }
    const texts: string[] = []
    const thoughts: string[] = []
    const calls: NonNullable<ChatMessage['toolCalls']> = []
    message.content.forEach((block, b) => {
      const where = `${at}.${b}`
      switch (block.type) {
        case 'text':
          texts.push(stringField(block, 'text', where))
          return
        case 'tool_use':
          if (message.role !== 'assistant') throw new InvalidInputError(`${where}: a tool_use block belongs to an assistant message`, `${where}.type`)
          calls.push({ id: stringField(block, 'id', where), name: stringField(block, 'name', where), arguments: JSON.stringify(block.input ?? {}) })
          return
        case 'tool_result': {
          if (message.role !== 'user') throw new InvalidInputError(`${where}: a tool_result block belongs to a user message`, `${where}.type`)
          const content = block.content == null ? '' : typeof block.content === 'string' ? block.content : Array.isArray(block.content) ? textOf(block.content as Block[], `${where}.content`) : null
          if (content == null) throw new InvalidInputError(`${where}.content must be a string or content blocks`, `${where}.content`)
          messages.push({ role: 'tool', content: block.is_error === true ? `Error: ${content}` : content, toolCallID: stringField(block, 'tool_use_id', where) })
          return
        }
        // Thoughts sent back with the history: the model's own reasoning of an earlier turn, not part of its answer
        case 'thinking':
          if (message.role === 'assistant' && typeof block.thinking === 'string') thoughts.push(block.thinking)
          return
        case 'redacted_thinking':
          return
        case 'image':
        case 'document':
        case 'search_result':
          texts.push(mediaText(block, where))
          return
        default:
          throw new InvalidInputError(`${where}: content blocks of type ${block.type} are not supported`, `${where}.type`)
      }
    })
    if (message.role === 'assistant') {
      if (texts.length > 0 || calls.length > 0) {
        messages.push({ role: 'assistant', content: texts.join('\n'), toolCalls: calls.length > 0 ? calls : null, reasoning: thoughts.length > 0 ? thoughts.join('\n') : null })
      }
    } else if (texts.length > 0) {
      messages.push({ role: message.role, content: texts.join('\n') })
    }
  })

  const tools: ToolDefinition[] = []
  const ignoredTools: string[] = []
  for (const tool of body.tools ?? []) {
    if (CLIENT_TOOL_TYPES.has(tool.type)) tools.push({ name: tool.name, description: tool.description ?? null, parameters: tool.input_schema ?? null })
    else ignoredTools.push(tool.name)
  }
  const choice = body.tool_choice
  let toolChoice: ToolChoice | null = null
  if (choice != null) {
    if (choice.type === 'tool' && choice.name == null) throw new InvalidInputError('tool_choice of type tool needs the tool\'s name', 'tool_choice.name')
    toolChoice = choice.type === 'any' ? 'required' : choice.type === 'tool' ? { name: choice.name as string } : choice.type
  }
  return {
    chat: {
      kind: 'chat',
      modelID: body.model,
      messages,
      maxTokens: body.max_tokens,
      temperature: body.temperature ?? null,
      topP: body.top_p ?? null,
      topK: body.top_k ?? null,
      stop: body.stop_sequences ?? null,
      tools,
      toolChoice: tools.length === 0 && toolChoice !== 'none' ? null : toolChoice,
      parallelToolCalls: choice?.disable_parallel_tool_use === true ? false : null,
      thoughtTokens: thoughtTokensOf(body.thinking)
    },
    ignoredTools
  }
}

/** Anthropic's usage: input tokens evaluated now, apart from those the prefix cache held. */
function toUsage (usage: ChatUsage): Usage {
  return {
    input_tokens: usage.promptTokens - usage.cachedTokens,
    output_tokens: usage.completionTokens,
    cache_read_input_tokens: usage.cachedTokens,
    cache_creation_input_tokens: 0
  }
}

function stopReason (done: DoneEvent): MessageOut['stop_reason'] {
  if (done.finishReason === 'length') return 'max_tokens'
  if (done.finishReason === 'tool_calls') return 'tool_use'
  return done.stopSequence != null ? 'stop_sequence' : 'end_turn'
}

/** A whole answer from its events: text and tool_use blocks in the order the model made them, and how it ended. */
function assemble (events: ChatEvent[]): { content: MessageOut['content'], done: DoneEvent } {
  const content: MessageOut['content'] = []
  const calls = new Map<number, { block: { type: 'tool_use', id: string, name: string, input: Record<string, unknown> }, json: string }>()
  let done: DoneEvent | null = null
  for (const event of events) {
    if (event.type === 'delta') {
      const last = content.at(-1)
      if (last?.type === 'text') last.text += event.text
      else if (event.text !== '') content.push({ type: 'text', text: event.text })
    } else if (event.type === 'reasoning') {
      const last = content.at(-1)
      if (last?.type === 'thinking') last.thinking += event.text
      else if (event.text !== '') content.push({ type: 'thinking', thinking: event.text, signature: '' })
    } else if (event.type === 'tool_call') {
      const block = { type: 'tool_use' as const, id: event.id, name: event.name, input: {} }
      content.push(block)
      calls.set(event.index, { block, json: '' })
    } else if (event.type === 'tool_arguments') {
      const call = calls.get(event.index)
      if (call == null) throw new Error(`arguments for tool call ${event.index}, which never started`)
      call.json += event.text
    } else done = event
  }
  if (done == null) throw new Error('generation ended without a final event')
  // The arguments were generated under the tool's grammar: a JSON object, unless max_tokens cut the call short, when
  // there is no object to give (stop_reason says max_tokens)
  for (const { block, json } of calls.values()) block.input = parsedArguments(json)
  return { content, done }
}

function parsedArguments (json: string): Record<string, unknown> {
  try {
    const parsed: unknown = JSON.parse(json)
    return typeof parsed === 'object' && parsed != null && !Array.isArray(parsed) ? parsed as Record<string, unknown> : {}
  } catch {
    return {}
  }
}

/** Blocks whose text the model reads: text, and images, documents and search results as mediaText gives them. */
function textOf (blocks: ReadonlyArray<Block>, at: string): string {
  return blocks.map((block, b) => {
    const where = `${at}.${b}`
    if (block.type === 'text') return stringField(block, 'text', where)
    if (MEDIA_BLOCKS.has(block.type)) return mediaText(block, where)
    // Tool search's answer (Claude Code's): the tools it found, which the request's tools list holds
    if (block.type === 'tool_reference') return `[tool: ${stringField(block, 'tool_name', where)}]`
    throw new InvalidInputError(`${where}: only text, image, document, search_result and tool_reference blocks are supported here, not ${block.type}`, `${where}.type`)
  }).join('\n')
}

type Block = Record<string, unknown> & { type: string }

const MEDIA_BLOCKS = new Set(['image', 'document', 'search_result'])

/**
 * An image, document or search result as the text a model that reads text only is shown. A document or search
 * result that is text is that text; an image, or a document that is not text (a PDF), is a placeholder that says so.
 * Refusing it would end the session: Claude Code sends a PNG it read as a tool_result's image, and every later turn
 * sends the history again.
 */
function mediaText (block: Record<string, unknown>, where: string): string {
  if (block.type === 'search_result') {
    const content = block.content
    if (!Array.isArray(content)) throw new InvalidInputError(`${where}.content must be text blocks`, `${where}.content`)
    const heading = [block.title, block.source].filter((part) => typeof part === 'string' && part !== '').join(', ')
    return [...(heading === '' ? [] : [`Search result: ${heading}`]), textOf(content as Block[], `${where}.content`)].join('\n')
  }
  if (block.type === 'document') {
    const source = block.source as { type?: unknown, data?: unknown, content?: unknown } | null | undefined
    const title = typeof block.title === 'string' && block.title !== '' ? block.title : null
    let text: string | null = null
    if (source?.type === 'text' && typeof source.data === 'string') text = source.data
    else if (source?.type === 'content' && typeof source.content === 'string') text = source.content
    else if (source?.type === 'content' && Array.isArray(source.content)) text = textOf(source.content as Block[], `${where}.source.content`)
    if (text == null) return `[document${title == null ? '' : ` "${title}"`} omitted: this model reads text only]`
    return title == null ? text : `${title}\n${text}`
  }
  return '[image omitted: this model reads text only]'
}

function stringField (block: Record<string, unknown>, field: string, where: string): string {
  const value = block[field]
  if (typeof value !== 'string') throw new InvalidInputError(`${where}.${field} must be a string`, `${where}.${field}`)
  return value
}

/** `thinking` as a thought budget: `enabled` its budget_tokens, `disabled` none, `adaptive` (or none given) the default. */
function thoughtTokensOf (thinking: MessagesRequest['thinking']): number | null {
  if (thinking == null || thinking.type === 'adaptive') return null
  if (thinking.type === 'disabled') return 0
  return thinking.budget_tokens ?? null
}
