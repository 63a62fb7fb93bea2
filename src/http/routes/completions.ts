import { randomUUID } from 'node:crypto'
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod'
import { InvalidInputError } from '../../errors.ts'
import type { CompletionEvent, DoneEvent, RoutedGeneration, RoutedRequest } from '../../inference/index.ts'
import { collectAnswer, streamGeneration } from '../generation-stream.ts'
import { errorResponses } from '../schemas/common.ts'
import { CompletionRequest, TextCompletion } from '../schemas/openai.ts'
import { requesterOf } from '../guards.ts'
import { clientGone } from '../sse.ts'
import { ptnOf, toSampling, toUsage, type InferenceRoutesOptions } from './chat.ts'

/** OpenAI's documented default for /v1/completions: a client that names no max_tokens gets a short answer. */
export const DEFAULT_COMPLETION_MAX_TOKENS = 16

/** POST /v1/completions: legacy text completion (LlamaIndex's OpenAILike, code completion with `suffix`). */
export const completionRoutes: FastifyPluginAsyncZod<InferenceRoutesOptions> = async (app, { router, onServed }) => {
  app.post('/v1/completions', {
    schema: { summary: 'Text completion, with fill-in-the-middle (OpenAI)', tags: ['openai'], body: CompletionRequest, response: { 200: TextCompletion, ...errorResponses } }
  }, async (request, reply) => {
    const body = request.body
    const completion = toCompletionRequest(body)
    const signal = clientGone(reply)
    const generation = router.route(completion, { signal, ptnID: ptnOf(request.headers['x-ptn-id'], null), requester: requesterOf(request.principal) }) as RoutedGeneration<CompletionEvent>
    const id = `cmpl-${randomUUID()}`
    const created = Math.floor(Date.now() / 1000)
    const echo = body.echo === true ? completion.prompt : ''
    const answer = (text: string, finishReason: DoneEvent['finishReason'] | null): TextCompletion => ({
      id, object: 'text_completion', created, model: body.model, system_fingerprint: null, choices: [{ text, index: 0, logprobs: null, finish_reason: finishReason }]
    })

    if (body.stream !== true) {
      let text = echo
      let done: DoneEvent | null = null
      for (const event of await collectAnswer(generation, signal, reply, () => { onServed?.(completion.modelID) })) {
        if (event.type === 'delta') text += event.text
        else done = event
      }
      if (done == null) throw new Error('generation ended without a final event')
      return { ...answer(text, done.finishReason), usage: toUsage(done.usage) }
    }

    const includeUsage = body.stream_options?.include_usage === true
    const served = await streamGeneration(reply, generation, {
      signal,
      opening: echo === '' ? [] : [answer(echo, null)],
      render: (event) => event.type === 'delta'
        ? [answer(event.text, null)]
        : [answer('', event.finishReason), ...(includeUsage ? [{ ...answer('', null), choices: [], usage: toUsage(event.usage) }] : [])]
    })
    if (served) onServed?.(completion.modelID)
    return reply
  })
}

function toCompletionRequest (body: CompletionRequest): RoutedRequest & { kind: 'completion', prompt: string } {
  if (body.n != null && body.n > 1) throw new InvalidInputError('n > 1 is not supported: this node returns one choice per request', 'n')
  if (body.best_of != null && body.best_of > 1) throw new InvalidInputError('best_of > 1 is not supported', 'best_of')
  if (body.logprobs != null && body.logprobs > 0) throw new InvalidInputError('logprobs is not supported', 'logprobs')
  return {
    kind: 'completion',
    modelID: body.model,
    prompt: promptText(body.prompt),
    suffix: body.suffix ?? null,
    ...toSampling(body),
    maxTokens: body.max_tokens ?? DEFAULT_COMPLETION_MAX_TOKENS
  }
}

function promptText (prompt: CompletionRequest['prompt']): string {
  if (typeof prompt === 'string') return prompt
  if (prompt.length === 0) throw new InvalidInputError('prompt must not be an empty list', 'prompt')
  if (prompt.every((part) => typeof part === 'string')) {
    if (prompt.length > 1) throw new InvalidInputError('one prompt per request: a list of several prompts would need n choices', 'prompt')
    return prompt[0]
  }
  throw new InvalidInputError('prompt as token ids is not supported: send the text (POST /v1/detokenize turns ids into text)', 'prompt')
}
