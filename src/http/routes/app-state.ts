import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod'
import { redactSettings, type SettingsStore } from '../../settings/index.ts'
import { AppSnapshot } from '../schemas/app.ts'
import { errorResponses } from '../schemas/common.ts'
import { SettingsObject } from '../schemas/settings.ts'
import { z } from 'zod'

export interface AppStateOptions {
  snapshot: () => AppSnapshot
  settings: SettingsStore
}

export const appStateRoutes: FastifyPluginAsyncZod<AppStateOptions> = async (app, { snapshot, settings }) => {
  app.get('/v1/app', { schema: { tags: ['app'], response: { 200: AppSnapshot, ...errorResponses } } }, async () => snapshot())

  // The body is validated by the settings store itself (one definition of what a setting may be), so that
  // unknown keys and cross-field rules (wan_enabled needs a relay URL) fail the same way everywhere. Secrets are
  // write-only: the answer masks them (issue 14).
  app.patch('/v1/app/settings', {
    schema: { tags: ['app'], body: z.record(z.string(), z.unknown()), response: { 200: SettingsObject, ...errorResponses } }
  }, async (request) => redactSettings(settings.update(request.body)))
}
