import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod'
import type { ApiKeys } from '../../keys/index.ts'
import { ApiKeyList, GenerateApiKeyBody, GeneratedApiKey, RevokeApiKeyBody, RevokedApiKey } from '../schemas/apikeys.ts'
import { errorResponses } from '../schemas/common.ts'

export const apiKeyRoutes: FastifyPluginAsyncZod<{ keys: ApiKeys }> = async (app, { keys }) => {
  const tags = ['apikeys']
  app.get('/v1/app/apikeys', { schema: { summary: 'List API keys (never the key itself)', tags, response: { 200: ApiKeyList, ...errorResponses } } }, async () => {
    return { keys: keys.list() }
  })

  app.post('/v1/app/apikeys', { schema: { summary: 'Create an API key, shown once', tags, body: GenerateApiKeyBody, response: { 200: GeneratedApiKey, ...errorResponses } } }, async (request) => {
    return keys.generate(request.body.name, request.body.scope)
  })

  app.post('/v1/app/apikeys/revoke', { schema: { summary: 'Revoke an API key at once', tags, body: RevokeApiKeyBody, response: { 200: RevokedApiKey, ...errorResponses } } }, async (request) => {
    keys.revoke(request.body.id)
    return { status: 'revoked' as const, id: request.body.id }
  })
}
