import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod'
import { SettingsPatch, redactSettings, type SettingsStore } from '../../settings/index.ts'
import { AppSnapshot } from '../schemas/app.ts'
import { errorResponses } from '../schemas/common.ts'
import { SettingsObject } from '../schemas/settings.ts'

export interface AppStateOptions {
  snapshot: () => AppSnapshot
  settings: SettingsStore
}

export const appStateRoutes: FastifyPluginAsyncZod<AppStateOptions> = async (app, { snapshot, settings }) => {
  app.get('/v1/app', { schema: { summary: 'The node\'s state: identity, hardware, model, peers, wallet, settings', tags: ['app'], response: { 200: AppSnapshot, ...errorResponses } } }, async () => snapshot())

  // The body schema is the settings domain's own (one definition of what a setting may be), so the OpenAPI document
  // lists every key; the store checks it again with the cross-field rules (wan_enabled needs a relay URL). Secrets
  // are write-only: the answer masks them.
  app.patch('/v1/app/settings', {
    schema: { summary: 'Change settings (all or none)', tags: ['app'], body: SettingsPatch, response: { 200: SettingsObject, ...errorResponses } }
  }, async (request) => redactSettings(settings.update(request.body)))
}
