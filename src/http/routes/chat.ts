import { randomUUID } from 'node:crypto'
import type { FastifyReply } from 'fastify'
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod'
import { InvalidInputError } from '../../errors.ts'
import type { ChatEvent, ChatMessage, ChatRouter, ChatUsage, RoutedChatRequest, RoutedGeneration } from '../../inference/index.ts'
import { toEnvelope } from '../errors.ts'
import { ChatCompletion, ChatCompletionRequest, ModelList, type ChatCompletionChunk } from '../schemas/openai.ts'
import { errorResponses } from '../schemas/common.ts'
import { requesterOf } from '../guards.ts'
import { clientGone, keepAlive, SseStream, startSse } from '../sse.ts'

/**
 * How long a streaming request may wait for its first event before we commit to a 200 stream. Failures that come
 * at once (queue full, no model, a bad parameter) still get their own status; a request that waits for a slot gets
 * its headers and keep-alive comments instead of a silent socket.
 */
const COMMIT_AFTER_MS = 250

export interface ChatRoutesOptions {
  router: ChatRouter
  /** Called when a request was served, for the models' least-recently-used bookkeeping. */
  onServed?: (modelID: string) => void
}

export const chatRoutes: FastifyPluginAsyncZod<ChatRoutesOptions> = async (app, { router, onServed }) => {
  app.get('/v1/models', { schema: { tags: ['openai'], response: { 200: ModelList, ...errorResponses } } }, async () => {
    const created = Math.floor(Date.now() / 1000)
    return {
      object: 'list' as const,
      data: router.models().map((model) => ({ id: model.modelID, object: 'model' as const, created, owned_by: model.ownedBy }))
    }
  })

  app.post('/v1/chat/completions', {
    schema: { tags: ['openai'], body: ChatCompletionRequest, response: { 200: ChatCompletion, ...errorResponses } }
  }, async (request, reply) => {
    const chat = toChatRequest(request.body)
    const ptnHeader = request.headers['x-ptn-id']
    const ptnID = (typeof ptnHeader === 'string' && ptnHeader !== '' ? ptnHeader : null) ?? request.body.ptn ?? null
    const signal = clientGone(reply)
    const generation = router.generate(chat, { signal, ptnID, requester: requesterOf(request.principal) })
    const id = `chatcmpl-${randomUUID()}`
    const created = Math.floor(Date.now() / 1000)
    const model = request.body.model

    if (request.body.stream !== true) {
      let text = ''
      let done: Extract<ChatEvent, { type: 'done' }> | null = null
      try {
        for (let next = await generation.events.next(); next.done !== true; next = await generation.events.next()) {
          if (next.value.type === 'delta') text += next.value.text
          else done = next.value
        }
      } catch (err) {
        if (!signal.aborted) throw err
        // The client left: generation stopped with it, and there is nobody to answer.
        reply.hijack()
        reply.raw.destroy()
        return reply
      }
      if (done == null) throw new Error('generation ended without a final event')
      onServed?.(chat.modelID)
      void reply.header('x-served-by', generation.servedBy)
      return {
        id,
        object: 'chat.completion' as const,
        created,
        model,
        system_fingerprint: null,
        choices: [{ index: 0, message: { role: 'assistant' as const, content: text, refusal: null }, logprobs: null, finish_reason: done.finishReason }],
        usage: toUsage(done.usage)
      }
    }

    // Streaming: wait briefly for the first event so that immediate failures keep their HTTP status. A request placed
    // on a peer waits for its first event in full: the router may still fail over to another peer until then, and
    // X-Served-By must name the one that answers.
    const first = generation.events.next()
    const settled = generation.servedBy !== 'local' || await Promise.race([
      first.then(() => true, () => true),
      new Promise<false>((resolve) => setTimeout(resolve, COMMIT_AFTER_MS, false).unref())
    ])
    if (settled) await first // rethrows an immediate failure into the error handler, before any byte is sent
    await streamCompletion(reply, generation, first, {
      id, created, model, includeUsage: request.body.stream_options?.include_usage === true, signal
    })
    if (!signal.aborted) onServed?.(chat.modelID)
    return reply
  })
}

async function streamCompletion (reply: FastifyReply, generation: RoutedGeneration, first: Promise<IteratorResult<ChatEvent>>,
  context: { id: string, created: number, model: string, includeUsage: boolean, signal: AbortSignal }): Promise<void> {
  const raw = startSse(reply, { 'x-served-by': generation.servedBy })
  const out = new SseStream(raw) // one socket write per event-loop turn, not one per token
  out.comment('stream opened')
  const stopKeepAlive = keepAlive(raw)
  const chunk = (delta: ChatCompletionChunk['choices'][0]['delta'], finishReason: 'stop' | 'length' | null): ChatCompletionChunk => ({
    id: context.id,
    object: 'chat.completion.chunk',
    created: context.created,
    model: context.model,
    system_fingerprint: null,
    choices: [{ index: 0, delta, logprobs: null, finish_reason: finishReason }],
    ...(context.includeUsage ? { usage: null } : {})
  })
  try {
    out.data(chunk({ role: 'assistant', content: '' }, null))
    for (let next = await first; next.done !== true; next = await generation.events.next()) {
      const event = next.value
      if (event.type === 'delta') {
        if (event.text !== '') out.data(chunk({ content: event.text }, null))
        continue
      }
      out.data(chunk({}, event.finishReason))
      if (context.includeUsage) {
        out.data({ ...chunk({}, null), choices: [], usage: toUsage(event.usage) })
      }
    }
    out.end('data: [DONE]\n\n')
  } catch (err) {
    if (context.signal.aborted) return // the client left; generation has already stopped
    // Mid-stream failure: an OpenAI-shaped error event, then [DONE], so SDKs surface it instead of hanging.
    const envelope = toEnvelope(err, reply.request.id, reply.log)
    out.data(envelope.body)
    out.end('data: [DONE]\n\n')
  } finally {
    stopKeepAlive()
  }
}

function toUsage (usage: ChatUsage): ChatCompletion['usage'] {
  return {
    prompt_tokens: usage.promptTokens,
    completion_tokens: usage.completionTokens,
    total_tokens: usage.totalTokens,
    prompt_tokens_details: { cached_tokens: usage.cachedTokens }
  }
}

/** Maps the OpenAI request onto our engine's request, refusing what we cannot honour by name (never dropping it). */
export function toChatRequest (body: ChatCompletionRequest): RoutedChatRequest {
  if (body.n != null && body.n > 1) throw new InvalidInputError('n > 1 is not supported: this node returns one choice per request', 'n')
  if (body.logprobs === true) throw new InvalidInputError('logprobs is not supported', 'logprobs')
  if (body.top_logprobs != null && body.top_logprobs > 0) throw new InvalidInputError('top_logprobs is not supported', 'top_logprobs')
  if (body.tools != null && body.tools.length > 0) throw new InvalidInputError('tools (function calling) is not supported', 'tools')
  if (body.functions != null && body.functions.length > 0) throw new InvalidInputError('functions (function calling) is not supported', 'functions')
  if (body.tool_choice != null && body.tool_choice !== 'none') throw new InvalidInputError('tool_choice is not supported', 'tool_choice')
  if (body.logit_bias != null && Object.keys(body.logit_bias).length > 0) throw new InvalidInputError('logit_bias is not supported', 'logit_bias')

  const messages: ChatMessage[] = body.messages.map((message, i) => {
    if (message.role === 'tool' || message.role === 'function' || (message.tool_calls?.length ?? 0) > 0) {
      throw new InvalidInputError(`messages[${i}]: tool messages are not supported`, `messages.${i}.role`)
    }
    return { role: message.role === 'developer' ? 'system' : message.role, content: messageText(message.content, i) }
  })
  const format = body.response_format
  return {
    modelID: body.model,
    messages,
    maxTokens: body.max_completion_tokens ?? body.max_tokens ?? null,
    temperature: body.temperature ?? null,
    topP: body.top_p ?? null,
    topK: body.top_k ?? null,
    stop: body.stop == null ? null : typeof body.stop === 'string' ? [body.stop] : body.stop,
    seed: body.seed ?? null,
    presencePenalty: body.presence_penalty ?? null,
    frequencyPenalty: body.frequency_penalty ?? null,
    responseFormat: format == null ? null : format.type === 'json_schema' ? { type: 'json_schema', schema: format.json_schema.schema } : format
  }
}

function messageText (content: ChatCompletionRequest['messages'][number]['content'], index: number): string {
  if (content == null) return ''
  if (typeof content === 'string') return content
  return content.map((part, p) => {
    if (part.type === 'text' && typeof part.text === 'string') return part.text
    throw new InvalidInputError(`messages[${index}].content[${p}]: content parts of type ${part.type} are not supported (text only)`, `messages.${index}.content.${p}.type`)
  }).join('\n')
}
