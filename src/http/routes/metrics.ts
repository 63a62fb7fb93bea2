import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod'
import { z } from 'zod'
import type { MetricsRegistry } from '../../metrics/index.ts'
import { errorResponses } from '../schemas/common.ts'

export const metricsRoutes: FastifyPluginAsyncZod<{ metrics: MetricsRegistry }> = async (app, { metrics }) => {
  app.get('/metrics', { schema: { summary: 'Prometheus metrics', tags: ['operations'], response: { 200: z.string(), ...errorResponses } } }, async (_request, reply) => {
    return reply.type(metrics.contentType).send(await metrics.render())
  })
}
