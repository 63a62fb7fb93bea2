import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod'
import { z } from 'zod'
import { NotFoundError } from '../../errors.ts'
import { howToGetModel, type ChatRouter, type ModelListing } from '../../inference/index.ts'
import { errorResponses } from '../schemas/common.ts'
import { Model, ModelList } from '../schemas/openai.ts'

export interface OpenAIModelRoutesOptions {
  router: Pick<ChatRouter, 'models'>
  /** Whether two model ids name the same model (the models domain's one matcher). */
  sameModel: (a: string, b: string) => boolean
}

/**
 * GET /v1/models and /v1/models/{id}: every model a request can name now, as OpenAI lists them. Loaded and
 * downloaded models are `owned_by: local` (a downloaded one is loaded on first use); models only peers serve are
 * owned by the peer that would answer.
 */
export const openaiModelRoutes: FastifyPluginAsyncZod<OpenAIModelRoutesOptions> = async (app, { router, sameModel }) => {
  const toModel = (listing: ModelListing, created: number): z.infer<typeof Model> =>
    ({ id: listing.modelID, object: 'model', created, owned_by: listing.ownedBy })

  app.get('/v1/models', { schema: { summary: 'Models this node can serve, locally or through peers (OpenAI)', tags: ['openai'], response: { 200: ModelList, ...errorResponses } } }, async () => {
    const created = Math.floor(Date.now() / 1000)
    return { object: 'list' as const, data: router.models().map((listing) => toModel(listing, created)) }
  })

  // Model ids hold slashes (hf.co/org/repo/file.gguf): the SDKs send them percent-encoded, curl users often raw,
  // so the id is the whole rest of the path.
  app.get('/v1/models/*', {
    schema: { summary: 'One model by id (OpenAI)', tags: ['openai'], params: z.object({ '*': z.string().min(1).max(1024) }), response: { 200: Model, ...errorResponses } }
  }, async (request) => {
    const id = request.params['*']
    const listing = router.models().find((model) => model.modelID === id || sameModel(model.modelID, id))
    if (listing == null) {
      throw new NotFoundError(`Model ${id} is not on this node and no peer serves it; ${howToGetModel(id)}`)
    }
    return toModel(listing, Math.floor(Date.now() / 1000))
  })
}
