// One streamed chat completion as the CLI reads it (`meshnode chat`, `meshnode run`): tokens as they arrive, then
// the usage and where it ran.
import type { ChatCompletionChunk, ModelList } from '../http/schemas/openai.ts'
import type { ApiClient } from './client.ts'
import { readSse } from './sse.ts'

export interface ChatMessage { role: 'system' | 'user' | 'assistant', content: string }

export interface ChatRequest {
  model: string
  messages: ChatMessage[]
  maxTokens?: number
  temperature?: number
  ptn?: string
}

export interface ChatAnswer {
  text: string
  usage: ChatCompletionChunk['usage']
  /** `local` or `peer:<nodeID>` (X-Served-By). */
  servedBy: string
  /** `stop`, `length` (the token limit cut it) …; null when the stream ended without one (interrupted). */
  finishReason: ChatCompletionChunk['choices'][number]['finish_reason']
}

/**
 * Streams a chat completion: `onText` sees each piece of the answer, `onData` each raw event (for --json). An error
 * event from the node ends it with that error. When `signal` aborts, the node stops generating and this returns what
 * came so far.
 */
export async function streamChat (client: ApiClient, request: ChatRequest, handlers: { onText?: (text: string) => void, onData?: (data: string) => void, signal?: AbortSignal } = {}): Promise<ChatAnswer> {
  const body = {
    model: request.model,
    messages: request.messages,
    stream: true,
    stream_options: { include_usage: true },
    ...(request.maxTokens == null ? {} : { max_tokens: request.maxTokens }),
    ...(request.temperature == null ? {} : { temperature: request.temperature }),
    ...(request.ptn == null ? {} : { ptn: request.ptn })
  }
  const response = await client.fetch('POST', '/v1/chat/completions', body, handlers.signal)
  const answer: ChatAnswer = { text: '', usage: null, servedBy: response.headers.get('x-served-by') ?? 'unknown', finishReason: null }
  try {
    for await (const { data } of readSse(response)) {
      if (data === '[DONE]') break
      const event = JSON.parse(data) as ChatCompletionChunk | { error: { message: string } }
      if ('error' in event) throw new Error(event.error.message)
      handlers.onData?.(data)
      const text = event.choices[0]?.delta.content
      if (text != null && text !== '') {
        answer.text += text
        handlers.onText?.(text)
      }
      answer.finishReason = event.choices[0]?.finish_reason ?? answer.finishReason
      if (event.usage != null) answer.usage = event.usage
    }
  } catch (err) {
    if (handlers.signal?.aborted !== true) throw err // interrupted on purpose: the answer so far is the answer
  }
  return answer
}

/** The model `chat` uses when none is named: the loaded one, else the first a peer offers. */
export async function firstModel (client: ApiClient): Promise<string> {
  const models = await client.get<ModelList>('/v1/models')
  const local = models.data.find((m) => m.owned_by === 'local') ?? models.data[0]
  if (local == null) throw new Error('No model is loaded here and no peer offers one. Load one with: meshnode models load <id>, or run one with: meshnode run <id>')
  return local.id
}
