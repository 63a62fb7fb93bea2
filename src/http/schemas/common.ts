import { z } from 'zod'

export const ErrorEnvelope = z.object({
  error: z.object({
    message: z.string(),
    type: z.string(),
    param: z.string().nullable(),
    code: z.string().nullable()
  })
})

/** The error answers every route can give, for the OpenAPI document. */
export const errorResponses = {
  400: ErrorEnvelope,
  401: ErrorEnvelope,
  402: ErrorEnvelope,
  403: ErrorEnvelope,
  404: ErrorEnvelope,
  409: ErrorEnvelope,
  413: ErrorEnvelope,
  429: ErrorEnvelope,
  500: ErrorEnvelope,
  503: ErrorEnvelope,
  507: ErrorEnvelope
} as const

export const IsoTime = z.string().describe('ISO 8601 UTC date-time')

/**
 * A whole number in a query string, written in decimal digits only: `0x10`, `1e3`, `5.0`, ` 5` and `+5`, which
 * `Number()` would read, are 400 rather than guesses.
 */
export function queryInteger (min: number, max: number) {
  return z.string().regex(/^\d{1,15}$/, { message: 'must be a whole number in decimal digits' })
    .transform(Number).pipe(z.number().int().min(min).max(max))
}

/**
 * Request bodies also accept the snake_case names older clients send. Renames `aliases` keys to their
 * camelCase field before validation, unless the camelCase field is present too (it wins).
 */
export function withAliases<T extends z.ZodType> (schema: T, aliases: Record<string, string>) {
  return z.preprocess((input) => {
    if (input == null || typeof input !== 'object' || Array.isArray(input)) return input
    const body: Record<string, unknown> = { ...input }
    for (const [alias, field] of Object.entries(aliases)) {
      if (alias in body) {
        if (!(field in body)) body[field] = body[alias]
        delete body[alias]
      }
    }
    return body
  }, schema)
}

/** The snake_case aliases request bodies accept, as older clients send them. */
export const SNAKE_ALIASES = {
  ptn_id: 'ptnID',
  node_id: 'nodeID',
  peer_id: 'peerID',
  ca_key_hex: 'caKeyHex',
  cert_data: 'certData',
  model_id: 'modelID',
  model: 'modelID',
  invite_code: 'inviteCode'
} as const
