import type { FastifyRequest } from 'fastify'
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod'
import type { ModelAliases, ModelStore } from '../../models/index.ts'
import { errorResponses } from '../schemas/common.ts'
import { ModelRecord } from '../schemas/app.ts'
import { AliasBody, AliasList, AliasParams, DownloadStarted, ImportBody, ModelAlias, ModelIDBody, ModelList, ModelLoaded, ModelUnloaded, UnloadBody } from '../schemas/models.ts'

export interface ModelRoutesOptions {
  models: ModelStore
  aliases?: ModelAliases
}

export const modelRoutes: FastifyPluginAsyncZod<ModelRoutesOptions> = async (app, { models, aliases }) => {
  const tags = ['models']

  if (aliases != null) {
    app.get('/v1/app/models/aliases', { schema: { summary: 'Names that stand for models', tags, response: { 200: AliasList, ...errorResponses } } }, async () => {
      return { aliases: aliases.list() }
    })
    app.post('/v1/app/models/alias', {
      schema: { summary: 'Give a model a name a client insists on', tags, body: AliasBody, response: { 200: ModelAlias, ...errorResponses } }
    }, async (request) => aliases.set(request.body.alias, request.body.modelID))
    app.delete('/v1/app/models/aliases/:alias', {
      schema: { summary: 'Remove an alias', tags, params: AliasParams, response: { 200: ModelAlias, ...errorResponses } }
    }, async (request) => aliases.remove(request.params.alias))
  }

  app.get('/v1/app/models', { schema: { summary: 'Models: catalog, downloaded, loaded', tags, response: { 200: ModelList, ...errorResponses } } }, async () => {
    return { models: models.list() }
  })

  app.post('/v1/app/models/download', {
    schema: { summary: 'Start (or join) a model download', tags, body: ModelIDBody, response: { 200: DownloadStarted, ...errorResponses } }
  }, async (request) => await models.startDownload(request.body.modelID))

  app.post('/v1/app/models/import', {
    schema: { summary: 'Register a GGUF file already on this machine, where it is',
      tags,
      description: 'register a GGUF file in place (never copied, never evicted, outside max_storage_gb); 404 when no file is there, 400 when it is not GGUF',
      body: ImportBody,
      response: { 200: ModelRecord, ...errorResponses }
    }
  }, async (request) => await models.import(request.body.path, request.body.modelID))

  app.post('/v1/app/models/load', {
    schema: {
      summary: 'Load a downloaded model into the engine, beside those loaded',
      tags,
      description: 'over the count or memory budget the least recently used idle model loaded for a request is evicted first; a model that cannot fit even alone is refused with 409 naming both sizes',
      body: ModelIDBody,
      response: { 200: ModelLoaded, ...errorResponses }
    }
  }, async (request) => {
    const loaded = await models.load(request.body.modelID)
    return { status: 'loaded' as const, modelID: loaded.modelID, contextLength: loaded.contextLength }
  })

  // Unload takes no body. Clients that send `Content-Type: application/json` with an empty body (many do for a bare
  // POST) would get fastify's "empty JSON body" 400, so this one route reads an empty JSON body as no body.
  await app.register(async (scope) => {
    // fastify's own JSON parser (prototype-poisoning checks included), which answers through its callback
    const parseJson = scope.getDefaultJsonParser('error', 'error') as (request: FastifyRequest, body: string, done: (err: Error | null, body?: unknown) => void) => void
    scope.removeContentTypeParser('application/json')
    scope.addContentTypeParser('application/json', { parseAs: 'string' }, (request, body, done) => {
      const text = typeof body === 'string' ? body : body.toString('utf8')
      if (text.trim() === '') {
        done(null, undefined)
        return
      }
      parseJson(request, text, done)
    })
    scope.post('/v1/app/models/unload', {
      schema: {
        summary: 'Unload one model, or every loaded model when no body names one',
        tags,
        description: 'once the requests in flight on it have finished; an unloaded model is not loaded again at the next start',
        body: UnloadBody,
        response: { 200: ModelUnloaded, ...errorResponses }
      }
    }, async (request) => {
      const unloaded = await models.unload((request.body as { modelID?: string } | null | undefined)?.modelID)
      return { status: 'unloaded' as const, modelID: unloaded[0] ?? null, unloaded }
    })
  })
}
