// The Responses API's request as the one internal chat request: its input items as chat messages, its function tools
// (other kinds left out, by name), tool_choice and text format; and the engine's refusals named back in the
// request's own fields. What cannot be honoured is refused by name.
import { InvalidInputError } from '../errors.ts'
import { ContextOverflowError, MAX_TOOL_DESCRIPTION_CHARS, type ChatEvent, type ChatMessage, type RoutedGeneration, type RoutedRequest, type ToolChoice, type ToolDefinition } from '../inference/index.ts'
import type { ResponsesInputItem, ResponsesRequest } from './schemas/responses.ts'
import { THOUGHT_TOKENS_BY_EFFORT } from './schemas/openai.ts'
import { boundedJsonText } from './routes/chat.ts'

/**
 * Content parts a model that reads text only cannot read, shown to it as a placeholder that says what was left out.
 * Refusing them would end the session: an agent sends its history, the image included, with every later turn.
 */
const MEDIA_PARTS = new Map([['input_image', 'image'], ['input_file', 'file'], ['input_audio', 'audio']])

/** The request as the engine's chat request, and what the route needs to answer it and to speak of it. */
export interface ChatPlan {
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
  // A reasoning item is the thought of the answer that follows it (its message or its calls): kept until that answer
  let thought: string | null = null
  const answered = (message: ChatMessage): ChatMessage => {
    if (thought != null && message.role === 'assistant' && (message.reasoning ?? '') === '') message.reasoning = thought
    thought = null
    return message
  }
  items.forEach((item, i) => {
    const at = `input.${i}`
    const type = 'type' in item && item.type != null ? item.type : item.role != null ? 'message' : null
    switch (type) {
      case 'message': {
        if (item.role == null) throw new InvalidInputError(`${at}: a message item needs a role`, `${at}.role`)
        const content = textOf(item.content ?? '', `${at}.content`)
        messages.push(answered(item.role === 'assistant' ? { role: 'assistant', content, toolCalls: null } : { role: item.role === 'user' ? 'user' : 'system', content }))
        origins.push(at)
        return
      }
      case 'function_call': {
        const call = { id: stringField(item, 'call_id', at), name: stringField(item, 'name', at), arguments: boundedJsonText(stringField(item, 'arguments', at), `${at}.arguments`) }
        const last = messages.at(-1)
        if (last?.role === 'assistant') {
          last.toolCalls = [...(last.toolCalls ?? []), call]
          answered(last)
        } else {
          messages.push(answered({ role: 'assistant', content: '', toolCalls: [call] }))
          origins.push(at)
        }
        return
      }
      case 'function_call_output': {
        const output = 'output' in item ? item.output : undefined
        if (output == null) throw new InvalidInputError(`${at}.output must be a string or input_text parts`, `${at}.output`)
        messages.push(answered({ role: 'tool', content: textOf(output, `${at}.output`), toolCallID: stringField(item, 'call_id', at) }))
        origins.push(at)
        return
      }
      // The model's thought of an earlier turn, sent back with the history: rendered as the thought of the answer after
      // it, as the model wrote it, so that the prompt holds what was evaluated then (a summary is not the thought, and an
      // encrypted one cannot be read: an item with neither text adds nothing)
      case 'reasoning': {
        const parts = Array.isArray(item.content) ? item.content : []
        // Joined as a kept response joins them (its items' text, as the model wrote it), so both render alike
        const text = parts.flatMap((part) => part.type === 'reasoning_text' && typeof part.text === 'string' ? [part.text] : []).join('')
        if (text !== '') thought = (thought ?? '') + text
        return
      }
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
    const media = MEDIA_PARTS.get(part.type)
    if (media != null) {
      const name = 'filename' in part && typeof part.filename === 'string' && part.filename !== '' ? ` ${part.filename}` : ''
      return `[${media}${name} omitted: this model reads text only]`
    }
    if (part.type === 'input_text' || part.type === 'output_text') throw new InvalidInputError(`${where}.text must be a string`, `${where}.text`)
    throw new InvalidInputError(`${where}: content parts of type ${part.type} are not supported (input_text, output_text, refusal, input_image, input_file and input_audio are)`, `${where}.type`)
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
export function inClientTerms (generation: RoutedGeneration<ChatEvent>, plan: ChatPlan): RoutedGeneration<ChatEvent> {
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
  // "The messages take 5000 tokens" reads right as it is, and stays a context overflow (its code is Codex's cue)
  if (err instanceof ContextOverflowError) return new ContextOverflowError(err.message, param, err)
  // A path in the message is the client's path
  const message = (field === 'messages' && index == null ? err.message : err.message.replaceAll(err.param, param)).replaceAll('response_format', 'text.format')
  return new InvalidInputError(message, param)
}
