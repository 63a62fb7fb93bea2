import { z } from 'zod'
import { API_KEY_SCOPES } from '../../keys/index.ts'
import { IsoTime } from './common.ts'

export const ApiKeyScope = z.enum(API_KEY_SCOPES).describe('admin: every route; inference: the OpenAI-compatible endpoints only')
export type ApiKeyScope = z.infer<typeof ApiKeyScope>

export const ApiKeyRow = z.object({
  id: z.string(),
  name: z.string(),
  prefix: z.string(),
  created: IsoTime,
  lastUsed: IsoTime.nullable(),
  status: z.enum(['active', 'revoked']),
  scope: ApiKeyScope
})
export type ApiKeyRow = z.infer<typeof ApiKeyRow>

export const ApiKeyList = z.object({ keys: z.array(ApiKeyRow) })
export type ApiKeyList = z.infer<typeof ApiKeyList>

export const GenerateApiKeyBody = z.object({ name: z.string().trim().min(1).max(128), scope: ApiKeyScope.default('admin') })

export const GeneratedApiKey = z.object({ id: z.string(), name: z.string(), key: z.string(), created: IsoTime, scope: ApiKeyScope })
export type GeneratedApiKey = z.infer<typeof GeneratedApiKey>

export const RevokeApiKeyBody = z.object({ id: z.string().min(1).max(128) })

export const RevokedApiKey = z.object({ status: z.literal('revoked'), id: z.string() })
export type RevokedApiKey = z.infer<typeof RevokedApiKey>
