import { z } from 'zod'
import { MAX_TOOL_NAME_CHARS, TOOL_NAME } from '../../inference/index.ts'
import { jsonDepthExceeds, nestedTooDeep } from '../../wire/index.ts'

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

/**
 * A tool's name, in every dialect: 1 to MAX_TOOL_NAME_CHARS letters, digits, _ or -, as OpenAI's and Anthropic's APIs
 * require (and the engine, of the tools it runs). The tools of kinds that cannot run here are named in a response
 * header (`X-Meshnode-Ignored-Tools`), which only these characters keep a valid one.
 */
export const ToolName = z.string().regex(TOOL_NAME, `must be 1 to ${MAX_TOOL_NAME_CHARS} letters, digits, _ or -`)

/**
 * A field that takes any JSON value (a tool's parameter schema, a call's input), refused naming the field when it nests
 * deeper than MAX_JSON_DEPTH: everything after the schema (JSON.stringify, structuredClone, a peer's frame) would
 * overflow the stack on it.
 */
export function boundedJson<T extends z.ZodType> (schema: T): T {
  return schema.refine((value) => !jsonDepthExceeds(value), nestedTooDeep())
}

/**
 * An object whose every member may be any JSON value (a loose object whose unknown keys are kept, or echoed back):
 * each member nested at most MAX_JSON_DEPTH, the refusal naming the member.
 */
export function boundedMembers<T extends z.ZodType<object>> (schema: T): T {
  return schema.superRefine((value, ctx) => {
    for (const [key, member] of Object.entries(value)) {
      if (jsonDepthExceeds(member)) ctx.addIssue({ code: 'custom', message: nestedTooDeep(), path: [key] })
    }
  })
}
