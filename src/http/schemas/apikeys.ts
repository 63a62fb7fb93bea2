import { z } from 'zod'
import { IsoTime } from './common.ts'

export const ApiKeyRow = z.object({
  id: z.string(),
  name: z.string(),
  prefix: z.string(),
  created: IsoTime,
  lastUsed: IsoTime.nullable(),
  status: z.enum(['active', 'revoked'])
})
export type ApiKeyRow = z.infer<typeof ApiKeyRow>

export const ApiKeyList = z.object({ keys: z.array(ApiKeyRow) })
export type ApiKeyList = z.infer<typeof ApiKeyList>

export const GenerateApiKeyBody = z.object({ name: z.string().trim().min(1).max(128) })

export const GeneratedApiKey = z.object({ id: z.string(), name: z.string(), key: z.string(), created: IsoTime })
export type GeneratedApiKey = z.infer<typeof GeneratedApiKey>

export const RevokeApiKeyBody = z.object({ id: z.string().min(1).max(128) })

export const RevokedApiKey = z.object({ status: z.literal('revoked'), id: z.string() })
export type RevokedApiKey = z.infer<typeof RevokedApiKey>
