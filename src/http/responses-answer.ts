// The Responses API's answer built from the generation's events: the response object, and the stream of named
// events (created, output items added, deltas, done, completed) that tells the same object as it is made.
import { randomUUID } from 'node:crypto'
import type { ChatEvent, ChatMessage, ChatUsage, DoneEvent } from '../inference/index.ts'
import type { ErrorEnvelope } from './errors.ts'
import { NamedEvent } from './generation-stream.ts'
import type { OutputItem, ResponseObject, ResponsesRequest, ResponseUsage } from './schemas/responses.ts'

/** The Responses request's fields a response object repeats, as the client gave them (with OpenAI's defaults). */
export function echo (body: ResponsesRequest): ResponseObject {
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
export class ResponseAnswer {
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

  /** The answer as the assistant message a continuation starts from, its thought included. */
  message (): ChatMessage {
    const calls = this.response.output.flatMap((item) => item.type === 'function_call' ? [{ id: item.call_id, name: item.name, arguments: item.arguments }] : [])
    const thought = this.response.output.flatMap((item) => item.type === 'reasoning' ? item.content.map((part) => part.text) : []).join('')
    return { role: 'assistant', content: this.#text.join(''), toolCalls: calls.length > 0 ? calls : null, ...(thought === '' ? {} : { reasoning: thought }) }
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
  // Codex tells a prompt past the context (it compacts, then asks again) by this code
  if (envelope.error.code === 'context_length_exceeded') return envelope.error.code
  if (envelope.error.type === 'rate_limit_error') return 'rate_limit_exceeded'
  if (envelope.error.type === 'invalid_request_error') return 'invalid_prompt'
  return 'server_error'
}

function hex (): string {
  return randomUUID().replaceAll('-', '')
}
