import { randomUUID } from 'node:crypto'
import type { ChatHistoryItem, ChatModelFunctionCall, ChatModelFunctions, ChatWrapper, GbnfJsonSchema, LlamaText } from 'node-llama-cpp'
import type { ChatEvent, ChatMessage, ChatRequest, ToolCall, ToolChoice, ToolDefinition } from './chat.ts'
import { InvalidGenerationRequestError } from './errors.ts'
import { toOutputSchema, type OutputSchema } from './grammar-schema.ts'
import { llamaModule } from './llama.ts'
import { jsonTextDepthExceeds } from '../wire/index.ts'

// Function calling through node-llama-cpp's chat wrappers: the model sees the tools and writes its calls in its own
// format (the GGUF's chat template, or the wrapper node-llama-cpp matched to it), and node-llama-cpp constrains each
// call's name and arguments by grammar once the model starts one. `required` and a named tool start the call for the
// model: the rendered prompt ends with the wrapper's call prefix and the function-name grammar is engaged from the
// first token, so the answer is a call, to an allowed tool, with arguments valid against its schema.

/** Longest tool name (OpenAI's limit). */
export const MAX_TOOL_NAME_CHARS = 64
/**
 * What a tool's name may be, in every dialect (OpenAI's and Anthropic's rule): it also keeps names plain text in every
 * chat template and valid in a response header.
 */
export const TOOL_NAME = new RegExp(`^[a-zA-Z0-9_-]{1,${MAX_TOOL_NAME_CHARS}}$`)
export const MAX_TOOLS = 128
/** Longest tool description. */
export const MAX_TOOL_DESCRIPTION_CHARS = 64 * 1024
/** Longest tool call id a conversation may carry; OpenAI's own are ~30 characters. */
export const MAX_TOOL_CALL_ID_CHARS = 256

export interface ToolPlan {
  functions: ChatModelFunctions
  /** Each tool's parameters, by name: what a call's arguments are checked against beyond their grammar. */
  parameters: ReadonlyMap<string, OutputSchema>
  /** The model's own wrapper, or one that makes the answer start with a call (tool_choice required or named). */
  chatWrapper: ChatWrapper
  /** 1 when parallel_tool_calls is false. */
  maxParallelFunctionCalls: number | undefined
}

/** Resolves `tools` and `toolChoice` for the model's chat wrapper; null when the model is to answer in text only. */
export async function planTools (request: ChatRequest, chatWrapper: ChatWrapper): Promise<ToolPlan | null> {
  const tools = request.tools ?? []
  if (!Array.isArray(tools) || tools.length > MAX_TOOLS) throw new InvalidGenerationRequestError(`tools must be a list of at most ${MAX_TOOLS} tools`, 'tools')
  const choice: ToolChoice = request.toolChoice ?? (tools.length > 0 ? 'auto' : 'none')
  if (choice === 'none') return null
  if (tools.length === 0) throw new InvalidGenerationRequestError('tool_choice needs tools to choose from', 'tool_choice')
  const { functions, parameters } = toFunctions(tools)
  let allowed = functions
  if (typeof choice === 'object') {
    const named = typeof choice.name === 'string' ? functions[choice.name] : undefined
    if (named == null) throw new InvalidGenerationRequestError(`tool_choice names ${JSON.stringify(choice.name)}, which is not one of the tools`, 'tool_choice')
    allowed = { [choice.name]: named }
  } else if (choice !== 'auto' && choice !== 'required') {
    throw new InvalidGenerationRequestError('tool_choice must be none, auto, required or a function to call', 'tool_choice')
  }
  return {
    functions: allowed,
    parameters,
    chatWrapper: choice === 'auto' ? chatWrapper : callingWrapper(chatWrapper, (await llamaModule()).LlamaText),
    maxParallelFunctionCalls: request.parallelToolCalls === false ? 1 : undefined
  }
}

function toFunctions (tools: readonly ToolDefinition[]): { functions: ChatModelFunctions, parameters: Map<string, OutputSchema> } {
  const functions: Record<string, { description?: string, params?: GbnfJsonSchema }> = {}
  const parameters = new Map<string, OutputSchema>()
  tools.forEach((tool, i) => {
    if (typeof tool?.name !== 'string' || !TOOL_NAME.test(tool.name)) {
      throw new InvalidGenerationRequestError(`a tool name must be 1 to ${MAX_TOOL_NAME_CHARS} letters, digits, _ or -`, `tools.${i}.function.name`)
    }
    if (Object.hasOwn(functions, tool.name)) throw new InvalidGenerationRequestError(`two tools are named ${tool.name}`, `tools.${i}.function.name`)
    // The translation response_format gets, except that a keyword the grammar cannot enforce is left out rather than
    // refused, as the real APIs take any JSON Schema for a tool that is not strict: clients send their tools with every
    // request, so one MCP or zod schema holding `propertyNames` would otherwise fail the whole session. The limits
    // against hostile schemas still refuse.
    const params = tool.parameters == null ? null : toOutputSchema(tool.parameters, `tools.${i}.function.parameters`, { unenforceable: 'leave out' })
    if (params != null) parameters.set(tool.name, params)
    functions[tool.name] = {
      ...(tool.description == null ? {} : { description: tool.description }),
      ...(params == null ? {} : { params: params.grammar })
    }
  })
  return { functions, parameters }
}

/**
 * The model's wrapper, rendering prompts that end inside a function call: after the wrapper's own call prefix
 * (`||call: ` for node-llama-cpp's generic format, `<tool_call>` and the like for templates that have one), with
 * node-llama-cpp told that a call is already engaged, so it samples a function name under its grammar at once.
 */
function callingWrapper (wrapper: ChatWrapper, join: typeof LlamaText): ChatWrapper {
  const generateContextState: ChatWrapper['generateContextState'] = (options) => {
    const state = wrapper.generateContextState(options)
    const { call, parallelism } = wrapper.settings.functions
    return {
      contextText: join([state.contextText, parallelism?.call.sectionPrefix ?? '', call.prefix]),
      stopGenerationTriggers: state.stopGenerationTriggers,
      ignoreStartText: state.ignoreStartText,
      // The wrapper's own triggers decide between text and a call; here the call is decided already.
      functionCall: { initiallyEngaged: true, disengageInitiallyEngaged: [] }
    }
  }
  return new Proxy(wrapper, {
    get: (target, property, receiver) => property === 'generateContextState' ? generateContextState : Reflect.get(target, property, receiver)
  })
}

/**
 * OpenAI messages as node-llama-cpp's chat history. An assistant message's tool calls become function calls in its
 * response, each with the result from the `tool` message that answers it, so the chat wrapper renders the whole
 * exchange in the model's own format.
 */
export function toChatHistory (messages: readonly ChatMessage[]): ChatHistoryItem[] {
  if (!Array.isArray(messages) || messages.length === 0) {
    throw new InvalidGenerationRequestError('messages must hold at least one message', 'messages')
  }
  const history: ChatHistoryItem[] = []
  /** Calls of the last assistant message still waiting for their tool message, by id. */
  const open = new Map<string, { call: ChatModelFunctionCall, at: string }>()
  const closeOpen = (): void => {
    const waiting = [...open.values()][0]
    if (waiting != null) throw new InvalidGenerationRequestError(`${waiting.at}: no tool message answers call ${JSON.stringify([...open.keys()][0])}`, waiting.at)
  }
  messages.forEach((message, i) => {
    if (typeof message?.content !== 'string') throw new InvalidGenerationRequestError(`messages[${i}].content must be a string`, `messages.${i}.content`)
    if (message.role !== 'tool') closeOpen()
    // Message text stays plain text: node-llama-cpp only emits special tokens for the template's own markers, so
    // "<|im_end|>" typed by a user cannot close a turn.
    switch (message.role) {
      case 'system': history.push({ type: 'system', text: message.content }); return
      case 'user': history.push({ type: 'user', text: message.content }); return
      case 'assistant': {
        const calls = (message.toolCalls ?? []).map((toolCall: ToolCall, j: number): ChatModelFunctionCall => {
          const at = `messages.${i}.tool_calls.${j}`
          if (typeof toolCall?.id !== 'string' || toolCall.id === '') throw new InvalidGenerationRequestError(`${at}.id must be a non-empty string`, `${at}.id`)
          if (typeof toolCall.name !== 'string' || toolCall.name === '') throw new InvalidGenerationRequestError(`${at}.function.name must be a non-empty string`, `${at}.function.name`)
          const call: ChatModelFunctionCall = { type: 'functionCall', name: toolCall.name, params: parseArguments(toolCall.arguments, `${at}.function.arguments`), result: undefined }
          if (open.has(toolCall.id)) throw new InvalidGenerationRequestError(`${at}.id repeats call id ${JSON.stringify(toolCall.id)}`, `${at}.id`)
          open.set(toolCall.id, { call, at })
          return call
        })
        // A thought sent back goes before the answer, as the model's thought segment (the template decides whether to show it)
        const thought = typeof message.reasoning === 'string' && message.reasoning !== '' ? [{ type: 'segment' as const, segmentType: 'thought' as const, text: message.reasoning, ended: true }] : []
        history.push({ type: 'model', response: [...thought, ...(message.content === '' && calls.length > 0 ? [] : [message.content]), ...calls] })
        return
      }
      case 'tool': {
        const answered = typeof message.toolCallID === 'string' ? open.get(message.toolCallID) : undefined
        if (answered == null) {
          throw new InvalidGenerationRequestError(`messages[${i}] answers no call of the assistant message before it (tool_call_id ${JSON.stringify(message.toolCallID ?? null)})`, `messages.${i}.tool_call_id`)
        }
        answered.call.result = toolResult(message.content)
        open.delete(message.toolCallID as string)
        return
      }
      default: throw new InvalidGenerationRequestError(`messages[${i}].role must be system, user, assistant or tool`, `messages.${i}.role`)
    }
  })
  closeOpen()
  return history
}

function parseArguments (text: unknown, param: string): unknown {
  if (typeof text !== 'string') throw new InvalidGenerationRequestError(`${param} must be a string of JSON`, param)
  try {
    return text.trim() === '' ? undefined : JSON.parse(text)
  } catch (err) {
    throw new InvalidGenerationRequestError(`${param} is not valid JSON (${(err as Error).message})`, param)
  }
}

/**
 * A tool's result as the template shows it: JSON stays structured, anything else is a string, and so is JSON nested
 * deeper than MAX_JSON_DEPTH (an AST from a tool), which the wrapper's recursive walk could not render.
 */
function toolResult (content: string): unknown {
  if (jsonTextDepthExceeds(content)) return content
  try {
    return JSON.parse(content)
  } catch {
    return content // plain text is a valid result too; the wrapper quotes it
  }
}

/**
 * Turns node-llama-cpp's function-call callbacks into our events: `tool_call` when a call starts, then its
 * arguments in fragments. Whitespace at the end of the arguments is held back (node-llama-cpp's grammar ends a call
 * with newlines), so the fragments join to exactly the call's JSON text.
 */
export class ToolCallEvents {
  readonly #emit: (event: ChatEvent) => void
  readonly #calls: Array<{ held: string, sent: boolean }> = []
  #completed = 0

  constructor (emit: (event: ChatEvent) => void) {
    this.#emit = emit
  }

  /** Calls completed so far. */
  get completed (): number {
    return this.#completed
  }

  paramsChunk (chunk: { callIndex: number, functionName: string, paramsChunk: string }): void {
    const call = this.#open(chunk.callIndex, chunk.functionName)
    const text = call.held + chunk.paramsChunk
    const end = text.trimEnd().length
    call.held = text.slice(end)
    if (end > 0) {
      call.sent = true
      this.#emit({ type: 'tool_arguments', index: chunk.callIndex, text: text.slice(0, end) })
    }
  }

  /** node-llama-cpp completes calls in order; one without parameters sent no chunk, and gets `{}` as OpenAI gives. */
  called (functionName: string): void {
    const index = this.#completed++
    const call = this.#open(index, functionName)
    if (!call.sent) {
      call.sent = true
      this.#emit({ type: 'tool_arguments', index, text: '{}' })
    }
  }

  #open (index: number, name: string): { held: string, sent: boolean } {
    let call = this.#calls[index]
    if (call == null) {
      call = { held: '', sent: false }
      this.#calls[index] = call
      this.#emit({ type: 'tool_call', index, id: `call_${randomUUID().replaceAll('-', '').slice(0, 24)}`, name })
    }
    return call
  }
}
