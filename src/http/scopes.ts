import type { FastifyRequest } from 'fastify'
import { PermissionError } from '../errors.ts'
import { scopeOf } from '../keys/index.ts'
import type { HttpApp } from './types.ts'

/**
 * The routes an `inference` key may call: the inference endpoints under /v1/ (OpenAI's and Anthropic's), by their route
 * pattern, so a route added under these paths (a model by id) is covered and nothing else is.
 */
const INFERENCE_ROUTES = new Set([
  '/v1/chat/completions', '/v1/completions', '/v1/embeddings', '/v1/models', '/v1/tokenize', '/v1/detokenize',
  '/v1/messages', '/v1/messages/count_tokens', '/v1/responses'
])
const INFERENCE_ROUTE_PREFIXES = ['/v1/models/', '/v1/responses/']

export function isInferenceRoute (route: string): boolean {
  return INFERENCE_ROUTES.has(route) || INFERENCE_ROUTE_PREFIXES.some((prefix) => route.startsWith(prefix))
}

/**
 * Scoped keys (docs/API.md, Authentication): runs after the guards have said who the request is, whatever proved it
 * (a Bearer key, or a session made from one), and refuses what that principal's scope does not cover with 403. An
 * unknown route is left to the 404 answer, a public route (no key needed) to its handler. With network access off no key is read, so nothing is scoped.
 */
export function registerScopeGuard (app: HttpApp): void {
  app.addHook('onRequest', async (request: FastifyRequest) => {
    const principal = request.principal
    if (principal == null || scopeOf(principal) === 'admin') return
    const route = request.routeOptions.url
    // Public routes (the dashboard's page and sign-in) need no key at all, so no scope either.
    if (route == null || isInferenceRoute(route) || request.routeOptions.config?.public === true) return
    throw new PermissionError(`This API key has the inference scope: it may call the OpenAI-compatible endpoints (/v1/chat/completions, /v1/models, ...), not ${request.method} ${route}`)
  })
}
