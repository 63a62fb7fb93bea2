import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod'
import { Health } from '../schemas/app.ts'

export const healthRoutes: FastifyPluginAsyncZod<{ health: () => Health }> = async (app, { health }) => {
  app.get('/health', { schema: { tags: ['health'], response: { 200: Health } } }, async () => health())
}
