// Wire shapes of the model routes (docs/API.md, Models); the CLI imports them too.
import { z } from 'zod'
import { MAX_MODEL_ID_LENGTH } from '../../models/index.ts'
import { DownloadProgress, ModelRecord } from './app.ts'
import { SNAKE_ALIASES, withAliases } from './common.ts'

/** `{modelID}`, also spelled `model_id` or `model` (the snake_case aliases older clients send). What an id may be is the model store's to judge. */
export const ModelIDBody = withAliases(z.object({ modelID: z.string().min(1).max(MAX_MODEL_ID_LENGTH) }), SNAKE_ALIASES)
/** Unload's body: a model to unload, or none (no body, or one without `modelID`: every model). */
export const UnloadBody = withAliases(z.object({ modelID: z.string().min(1).max(MAX_MODEL_ID_LENGTH).optional() }), SNAKE_ALIASES).nullish()

/** A file path: as long as any file system allows. */
export const MAX_IMPORT_PATH_LENGTH = 4096

/** `{path, modelID?}`: a GGUF file the node can read, by its absolute path; the id defaults to the file's name. */
export const ImportBody = withAliases(z.object({
  path: z.string().min(1).max(MAX_IMPORT_PATH_LENGTH),
  modelID: z.string().min(1).max(MAX_MODEL_ID_LENGTH).optional()
}), SNAKE_ALIASES)
export type ImportBody = z.infer<typeof ImportBody>

export const ModelList = z.object({ models: z.array(ModelRecord) })
export type ModelList = z.infer<typeof ModelList>

/** `downloaded` when the file is already here: nothing to wait for. */
export const DownloadStarted = z.object({ status: z.enum(['downloading', 'downloaded']), modelID: z.string() })
export type DownloadStarted = z.infer<typeof DownloadStarted>

export const ModelLoaded = z.object({ status: z.literal('loaded'), modelID: z.string(), contextLength: z.number() })
export type ModelLoaded = z.infer<typeof ModelLoaded>

/** `unloaded`: the models unloaded (none when the one named was not loaded); `modelID`: the first of them, or null. */
export const ModelUnloaded = z.object({
  status: z.literal('unloaded'),
  modelID: z.string().nullable(),
  unloaded: z.array(z.string()).describe('an addition: every model unloaded, as a node holds several')
})
export type ModelUnloaded = z.infer<typeof ModelUnloaded>

/** The `data` of each event on GET /v1/app/events, by event name. */
export const ModelEvents = {
  'download.started': z.object({ modelID: z.string(), totalBytes: z.number().nullable() }),
  'download.progress': DownloadProgress.extend({ modelID: z.string() }),
  'download.verifying': z.object({ modelID: z.string() }),
  'download.completed': z.object({ modelID: z.string(), sizeBytes: z.number(), sha256: z.string() }),
  'download.failed': z.object({ modelID: z.string(), error: z.string() }),
  'model.loaded': z.object({ modelID: z.string(), contextLength: z.number(), reason: z.enum(['explicit', 'request']) }),
  'model.load_failed': z.object({ modelID: z.string(), error: z.string() }),
  'model.unloaded': z.object({ modelID: z.string(), reason: z.enum(['explicit', 'evicted', 'idle', 'closing']) }),
  'model.evicted': z.object({ modelID: z.string(), sizeBytes: z.number() })
} as const
export type ModelEventName = keyof typeof ModelEvents
export type ModelEventData<E extends ModelEventName> = z.infer<(typeof ModelEvents)[E]>

export const ModelAlias = z.object({
  alias: z.string().describe('the name a client sends'),
  modelID: z.string().describe('the model it stands for')
})
export const AliasBody = withAliases(z.object({
  alias: z.string().min(1).max(256),
  modelID: z.string().min(1).max(256)
}), SNAKE_ALIASES)
export const AliasList = z.object({ aliases: z.array(ModelAlias) })
export const AliasParams = z.object({ alias: z.string().min(1).max(256) })
export type ModelAlias = z.infer<typeof ModelAlias>
export type AliasList = z.infer<typeof AliasList>
