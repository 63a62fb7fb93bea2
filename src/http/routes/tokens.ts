import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod'
import type { LocalRouter } from '../../inference/index.ts'
import { errorResponses } from '../schemas/common.ts'
import { DetokenizeRequest, DetokenizeResult, TokenizeRequest, TokenizeResult } from '../schemas/openai.ts'
import { clientGone } from '../sse.ts'

export interface TokenRoutesOptions {
  /** This node's models: tokens are a model's own, so these run where the model file is (loaded on first use). */
  tokenizer: Pick<LocalRouter, 'tokenize' | 'detokenize'>
}

/** POST /v1/tokenize and /v1/detokenize, as llama-server has them: a model's token ids for a text, and back. */
export const tokenRoutes: FastifyPluginAsyncZod<TokenRoutesOptions> = async (app, { tokenizer }) => {
  app.post('/v1/tokenize', {
    schema: { summary: 'Tokenize text with a model (llama-server)', tags: ['openai'], body: TokenizeRequest, response: { 200: TokenizeResult, ...errorResponses } }
  }, async (request, reply) => {
    const { model, content, add_special: addSpecial } = request.body
    return { tokens: await tokenizer.tokenize(model, content, { addSpecial: addSpecial === true, signal: clientGone(reply) }) }
  })

  app.post('/v1/detokenize', {
    schema: { summary: 'Turn tokens back into text (llama-server)', tags: ['openai'], body: DetokenizeRequest, response: { 200: DetokenizeResult, ...errorResponses } }
  }, async (request, reply) => {
    const { model, tokens } = request.body
    return { content: await tokenizer.detokenize(model, tokens, { signal: clientGone(reply) }) }
  })
}
