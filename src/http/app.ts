import { randomUUID } from 'node:crypto'
import Fastify, { LogController, type FastifyBaseLogger, type FastifyServerOptions } from 'fastify'
import swagger from '@fastify/swagger'
import { jsonSchemaTransform, serializerCompiler, validatorCompiler, type ZodTypeProvider } from 'fastify-type-provider-zod'
import type { Logger } from 'pino'
import type { ChatRouter, LocalRouter } from '../inference/index.ts'
import type { ApiKeys, Sessions } from '../keys/index.ts'
import type { MetricsRegistry } from '../metrics/index.ts'
import type { ModelAliases, ModelStore } from '../models/index.ts'
import type { SettingsStore } from '../settings/index.ts'
import { UnavailableError } from '../errors.ts'
import { createServer as createHttpServer, type Server } from 'node:http'
import { createServer as createHttpsServer } from 'node:https'
import { ConnectionCap, DEFAULT_CONNECTION_LIMITS, serverOptions, type ConnectionLimits } from './connections.ts'
import { clientErrorHandler, errorHandler, notFoundHandler, requestIDHeaders } from './errors.ts'
import { RouteTable } from './route-table.ts'
import { registerGuards, type GuardOptions } from './guards.ts'
import { registerScopeGuard } from './scopes.ts'
import { registerStreamRevocation } from './open-streams.ts'
import { apiKeyRoutes } from './routes/apikeys.ts'
import { sessionRoutes } from './routes/session.ts'
import { dashboardRoutes } from './routes/dashboard.ts'
import { eventsRoutes, type EventsRoutesOptions } from './routes/events.ts'
import { appStateRoutes } from './routes/app-state.ts'
import { chatRoutes } from './routes/chat.ts'
import { messagesRoutes } from './routes/messages.ts'
import { responsesRoutes } from './routes/responses.ts'
import { completionRoutes } from './routes/completions.ts'
import { embeddingRoutes } from './routes/embeddings.ts'
import { openaiModelRoutes } from './routes/openai-models.ts'
import { tokenRoutes } from './routes/tokens.ts'
import { healthRoutes } from './routes/health.ts'
import { metricsRoutes } from './routes/metrics.ts'
import { peersRoutes, type PeersRoutesOptions } from './routes/peers.ts'
import { walletRoutes, type WalletRoutesOptions } from './routes/wallet.ts'
import { ptnRoutes } from './routes/ptn.ts'
import type { PtnService } from '../ptn/index.ts'
import { modelRoutes } from './routes/models.ts'
import { agentRoutes } from './routes/agent.ts'
import type { AgentService } from '../agent/index.ts'
import type { StoredResponses } from '../responses/index.ts'
import type { AppSnapshot, Health } from './schemas/app.ts'
import type { HttpApp } from './types.ts'
import { DEFAULT_PORT } from '../config.ts'

declare module 'fastify' {
  interface FastifyInstance {
    /** A server for another listener of this app (not yet listening): the app's handler, limits and answers. */
    createListener: (tls: TlsCredentials | null) => Server
  }
}

/** PEM certificate (chain) and private key of the HTTPS listeners. */
export interface TlsCredentials {
  cert: string | Buffer
  key: string | Buffer
}

/** Bodies over 1 MiB are refused with 413. */
export const BODY_LIMIT_BYTES = 1024 * 1024

export interface HttpDeps {
  log: Logger
  settings: SettingsStore
  keys: ApiKeys
  /** Dashboard browser sessions: the cookie the guards accept besides a Bearer key. */
  sessions: Sessions
  metrics: MetricsRegistry
  health: () => Health
  snapshot: () => AppSnapshot
  /** The peer table; absent only where a test builds the app without a node. */
  peers?: PeersRoutesOptions
  router: ChatRouter
  /** Tokenize and detokenize with this node's models; absent only where a test builds the app without a node. */
  tokenizer?: Pick<LocalRouter, 'tokenize' | 'detokenize' | 'countChatTokens'>
  /** Whether two model ids name the same model (the models domain's one matcher). Default: equal strings. */
  sameModel?: (a: string, b: string) => boolean
  /** Names clients insist on, standing for models (`/v1/app/models/aliases`); absent only where a test builds the app without a node. */
  aliases?: ModelAliases
  /** Responses kept for the Responses API (`/v1/responses`); absent only where a test builds the app without a node. */
  responses?: StoredResponses
  /** Called after an OpenAI request (chat, completion, embeddings) was served, with the model it named. */
  onServed?: (modelID: string) => void
  /** The wallet and its on-chain status; absent only where a test builds the app without a node. */
  wallet?: WalletRoutesOptions
  /** Private trusted networks; absent only where a test builds the app without a node. */
  ptn?: PtnService
  /** Catalog, downloads, load and unload; absent only where a test builds the app without a node. */
  models?: ModelStore
  /** This node's agent: profile, directory, conversations; absent only where a test builds the app without a node. */
  agent?: AgentService
  /** Wallet and peer sources of GET /v1/app/events; absent only where a test builds the app without a node. */
  events?: Pick<EventsRoutesOptions, 'ledger' | 'network'>
  /** The dashboard's build output, served at `/`; absent only where a test builds the app without a node. */
  dashboardDir?: string
}

export interface HttpOptions extends GuardOptions {
  version: string
  /** Timeouts and the per-address connection cap; each defaults to DEFAULT_CONNECTION_LIMITS. */
  limits?: Partial<ConnectionLimits>
}

/**
 * Every schema is zod's. Given as the compilers' factories (not by setValidatorCompiler, which comes after fastify has
 * built its defaults), fastify never loads ajv or fast-json-stringify's compiler, modules and memory that no route
 * uses (bench/README.md). fastify types these factories after ajv's; at run time each returns a compiler of route
 * schemas, as zod's are. Each context builds its compilers when its first route needs them, so the root's
 * `app.validatorCompiler` and `app.serializerCompiler` stay undefined: read the route's own, never those.
 */
type CompilersFactory = NonNullable<NonNullable<FastifyServerOptions['schemaController']>['compilersFactory']>
const ZOD_COMPILERS = { buildValidator: () => validatorCompiler, buildSerializer: () => serializerCompiler } as unknown as CompilersFactory

/**
 * The fastify app: guards first, then one plugin per resource. The error handler is set once and may not be
 * overridden, so every failure, from any plugin, answers in the one envelope.
 */
export async function buildHttpApp (deps: HttpDeps, options: HttpOptions): Promise<HttpApp> {
  const limits: ConnectionLimits = { ...DEFAULT_CONNECTION_LIMITS, ...options.limits }
  const app = Fastify({
    loggerInstance: deps.log as FastifyBaseLogger,
    logController: new LogController({ disableRequestLogging: true }),
    bodyLimit: BODY_LIMIT_BYTES,
    genReqId: () => randomUUID(),
    requestIdHeader: false,
    allowErrorHandlerOverride: false,
    // Requests that arrive while the node closes get a 503 in our envelope (the hook below), not fastify's own body.
    return503OnClosing: false,
    // Node's refusals and fastify's routing refusals (a malformed or overlong URL) answer in the envelope too.
    clientErrorHandler,
    frameworkErrors: errorHandler,
    http: serverOptions(limits),
    requestTimeout: limits.requestTimeoutMs,
    keepAliveTimeout: limits.keepAliveTimeoutMs,
    // Ids (conversation, PTN, key) can be longer than find-my-way's default of 100, which answers 414 outside our envelope.
    routerOptions: { maxParamLength: 1024 },
    forceCloseConnections: 'idle',
    schemaController: { compilersFactory: ZOD_COMPILERS }
  }).withTypeProvider<ZodTypeProvider>()
  app.setErrorHandler(errorHandler)
  const routes = new RouteTable()
  app.addHook('onRoute', (route) => { routes.add(route.method, route.url) })
  app.setNotFoundHandler(notFoundHandler((path) => routes.methodsFor(path)))
  const cap = new ConnectionCap({ log: deps.log }, { maxPerAddress: limits.maxConnectionsPerAddress, maxLoopback: limits.maxLoopbackConnections })
  cap.watch(app.server)
  // More listeners for the same app (the network ones): the same handler, timeouts, client-error answers
  // and connection cap as the loopback listener fastify owns; HTTPS when given a certificate.
  app.decorate('createListener', (tls: TlsCredentials | null): Server => {
    const server = tls == null
      ? createHttpServer(serverOptions(limits), app.routing)
      : createHttpsServer({ ...serverOptions(limits), cert: tls.cert, key: tls.key }, app.routing)
    server.on('clientError', clientErrorHandler.bind(app))
    cap.watch(server)
    return server
  })
  let closing = false
  app.addHook('preClose', async () => { closing = true })
  app.addHook('onRequest', async () => {
    if (closing) throw new UnavailableError('meshnode is shutting down')
  })

  const requests = deps.metrics.counter('meshnode_http_requests_total', 'HTTP requests by route and status', ['method', 'route', 'status'])
  const latency = deps.metrics.histogram('meshnode_http_request_duration_seconds', 'HTTP request latency by route',
    [0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 30], ['route'])
  // A client that leaves before its answer is complete (a closed tab, a Ctrl-C, a timeout on its side) is no error of
  // ours: one info line and a count, whatever the route (streams included; hijacked replies never reach onResponse).
  const disconnects = deps.metrics.counter('meshnode_http_client_disconnects_total', 'Requests whose client left before the response was complete, by route', ['route'])
  app.addHook('onRequest', async (request, reply) => {
    reply.raw.once('close', () => {
      if (reply.raw.writableEnded) return
      const route = request.routeOptions.url ?? 'unmatched'
      const shuttingDown = !app.server.listening // the grace period ran out and the node cut the connection itself
      if (!shuttingDown) disconnects.inc({ route })
      request.log.info({ method: request.method, path: request.url.split('?')[0], ms: Math.round(reply.elapsedTime), headersSent: reply.raw.headersSent },
        shuttingDown ? 'request cut by shutdown' : 'client disconnected before the response was complete')
    })
  })
  app.addHook('onSend', async (request, reply) => {
    void reply.headers(requestIDHeaders(request))
  })
  app.addHook('onResponse', async (request, reply) => {
    const route = request.routeOptions.url ?? 'unmatched'
    requests.inc({ method: request.method, route, status: String(reply.statusCode) })
    latency.observe(reply.elapsedTime / 1000, { route })
    // One line per request (fastify's default is two); the URL path only, since a query could carry anything.
    request.log.info({ method: request.method, path: request.url.split('?')[0], status: reply.statusCode, ms: Math.round(reply.elapsedTime) }, 'request')
  })

  await app.register(swagger, {
    openapi: {
      // 3.1: JSON Schema 2020-12, so a nullable union is `anyOf [..., {type: null}]`, valid as written (the
      // document passes `redocly lint`, test/http/openapi.test.ts).
      openapi: '3.1.0',
      info: { title: 'meshnode node control API', version: options.version, license: { name: 'MIT', identifier: 'MIT' } },
      servers: [{ url: `http://127.0.0.1:${DEFAULT_PORT}`, description: 'a node on this machine, at the default --port' }],
      components: { securitySchemes: { bearer: { type: 'http', scheme: 'bearer' } } },
      security: [{ bearer: [] }]
    },
    transform: documentedRoute
  })
  registerGuards(app, deps, options)
  registerScopeGuard(app)
  registerStreamRevocation(app, deps)

  await app.register(healthRoutes, { health: deps.health })
  await app.register(appStateRoutes, { snapshot: deps.snapshot, settings: deps.settings })
  await app.register(apiKeyRoutes, { keys: deps.keys })
  await app.register(sessionRoutes, { sessions: deps.sessions, keys: deps.keys, settings: deps.settings })
  await app.register(metricsRoutes, { metrics: deps.metrics })
  if (deps.peers != null) await app.register(peersRoutes, deps.peers)
  // The OpenAI-compatible API: every route under /v1/ outside /v1/app/ (an `inference` key scope's prefix list).
  await app.register(openaiModelRoutes, { router: deps.router, sameModel: deps.sameModel ?? ((a, b) => a === b) })
  await app.register(chatRoutes, { router: deps.router, onServed: deps.onServed })
  if (deps.responses != null) await app.register(responsesRoutes, { router: deps.router, responses: deps.responses, onServed: deps.onServed })
  await app.register(messagesRoutes, { router: deps.router, counter: deps.tokenizer, onServed: deps.onServed })
  await app.register(completionRoutes, { router: deps.router, onServed: deps.onServed })
  await app.register(embeddingRoutes, { router: deps.router, onServed: deps.onServed })
  if (deps.tokenizer != null) await app.register(tokenRoutes, { tokenizer: deps.tokenizer })
  if (deps.wallet != null) await app.register(walletRoutes, deps.wallet)
  if (deps.ptn != null) await app.register(ptnRoutes, { ptn: deps.ptn })
  if (deps.models != null) {
    await app.register(modelRoutes, { models: deps.models, aliases: deps.aliases })
    await app.register(eventsRoutes, { models: deps.models, settings: deps.settings, ...deps.events })
  }
  if (deps.agent != null) await app.register(agentRoutes, { agent: deps.agent })
  if (deps.dashboardDir != null) await app.register(dashboardRoutes, { dir: deps.dashboardDir })
  app.get('/openapi.json', { schema: { hide: true } }, async () => app.swagger())
  return app
}

/**
 * The zod schemas as OpenAPI, and a wildcard route (`/v1/models/*`: a model id has slashes) as a `{id}` path
 * parameter, since `*` is not a parameter name a document may use (redocly's path-parameters-defined).
 */
function documentedRoute (input: Parameters<typeof jsonSchemaTransform>[0]): ReturnType<typeof jsonSchemaTransform> {
  const output = jsonSchemaTransform(input)
  if (!output.url.endsWith('/*')) return output
  const params = output.schema.params as { properties?: Record<string, unknown>, required?: string[] } | undefined
  if (params?.properties?.['*'] != null) {
    const { '*': wildcard, ...rest } = params.properties
    output.schema.params = { ...params, properties: { ...rest, id: wildcard }, required: (params.required ?? []).map((name) => name === '*' ? 'id' : name) }
  }
  return { ...output, url: `${output.url.slice(0, -1)}:id` }
}
