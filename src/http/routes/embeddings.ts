import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod'
import { InvalidInputError } from '../../errors.ts'
import type { DoneEvent, EmbeddingEvent, RoutedGeneration } from '../../inference/index.ts'
import { collectGeneration } from '../generation-stream.ts'
import { errorResponses } from '../schemas/common.ts'
import { EmbeddingList, EmbeddingRequest } from '../schemas/openai.ts'
import { requesterOf } from '../guards.ts'
import { clientGone } from '../sse.ts'
import { ptnOf, type InferenceRoutesOptions } from './chat.ts'

/** POST /v1/embeddings: one vector per input string, as floats or as base64 of little-endian float32 (RAG stacks). */
export const embeddingRoutes: FastifyPluginAsyncZod<InferenceRoutesOptions> = async (app, { router, onServed }) => {
  app.post('/v1/embeddings', {
    schema: { summary: 'Embeddings of one or more inputs (OpenAI)', tags: ['openai'], body: EmbeddingRequest, response: { 200: EmbeddingList, ...errorResponses } }
  }, async (request, reply) => {
    const body = request.body
    const input = inputTexts(body.input)
    const signal = clientGone(reply)
    const generation = router.route({ kind: 'embeddings', modelID: body.model, input }, { signal, ptnID: ptnOf(request.headers['x-ptn-id'], null), requester: requesterOf(request.principal) }) as RoutedGeneration<EmbeddingEvent>
    const vectors: number[][] = []
    let done: DoneEvent | null = null
    for (const event of await collectGeneration(generation, signal)) {
      if (event.type === 'embedding') vectors[event.index] = event.vector
      else done = event
    }
    if (done == null || vectors.length !== input.length || vectors.includes(undefined as unknown as number[])) {
      throw new Error('the embeddings answer did not give one vector per input')
    }
    const length = vectors[0].length
    if (body.dimensions != null && body.dimensions !== length) {
      // Shortening is only meaningful for models trained for it (Matryoshka); truncating any other would mislead.
      throw new InvalidInputError(`Model ${body.model} gives ${length}-dimensional embeddings and cannot shorten them; omit dimensions or send ${length}`, 'dimensions')
    }
    onServed?.(body.model)
    void reply.header('x-served-by', generation.servedBy)
    const base64 = body.encoding_format === 'base64'
    return {
      object: 'list' as const,
      data: vectors.map((vector, index) => ({ object: 'embedding' as const, index, embedding: base64 ? float32Base64(vector) : vector })),
      model: body.model,
      usage: { prompt_tokens: done.usage.promptTokens, total_tokens: done.usage.promptTokens }
    }
  })
}

function inputTexts (input: EmbeddingRequest['input']): string[] {
  if (typeof input === 'string') return [input]
  if (input.every((item) => typeof item === 'string')) return input
  throw new InvalidInputError('input as token ids is not supported: send the text (POST /v1/detokenize turns ids into text)', 'input')
}

/** The encoding OpenAI's clients decode: the vector's float32 values, little-endian, in base64. */
function float32Base64 (vector: number[]): string {
  const bytes = Buffer.alloc(vector.length * 4)
  vector.forEach((value, i) => bytes.writeFloatLE(value, i * 4))
  return bytes.toString('base64')
}
