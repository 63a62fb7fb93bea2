import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod'
import { Health } from '../schemas/app.ts'
import { errorResponses } from '../schemas/common.ts'

export const healthRoutes: FastifyPluginAsyncZod<{ health: () => Health }> = async (app, { health }) => {
  app.get('/health', { schema: { summary: 'Liveness; never needs a key', tags: ['health'], response: { 200: Health, ...errorResponses } } }, async () => health())
}
