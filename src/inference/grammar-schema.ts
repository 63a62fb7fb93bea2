import { createContext, Script } from 'node:vm'
import type { GbnfJsonSchema } from 'node-llama-cpp'
import { InvalidGenerationRequestError } from './errors.ts'

// node-llama-cpp compiles a subset of JSON Schema into a grammar and reads anything else leniently: an unknown
// `type` or `anyOf` silently becomes `null`, `{}` becomes `null`, `pattern` is ignored. A constraint it would drop
// means output that does not match the caller's schema, so we translate what we can (anyOf, type lists,
// definitions) and refuse the rest here, naming the keyword, instead of answering with the wrong shape.

const MAX_SCHEMA_DEPTH = 32 // deep enough for real schemas; bounds our recursion and the grammar's size
/**
 * The largest least count (minLength, minItems, minProperties) constrained output may require: node-llama-cpp writes
 * it as a repetition `{n,}` of the grammar, and llama.cpp's grammar parser refuses more than this ("number of
 * repetitions exceeds sane defaults", measured at its pinned version), so a larger one is refused here, by name.
 * The most counts (maxLength, ...) are written as nested options, and any is taken.
 */
export const MAX_SCHEMA_LEAST_COUNT = 1000
/**
 * llama.cpp's grammar parser writes a bounded repetition `{m,n}` out as about n rules, each kept in memory and built
 * on the event loop when the grammar is made (measured: 1.3 ms and ~0.2 MB per thousand); it takes counts up to
 * GRAMMAR_EXPANDED_COUNT so, and larger ones without expanding them. So the counts of one schema (minLength,
 * maxLength, minItems, maxItems, minProperties, maxProperties, each up to GRAMMAR_EXPANDED_COUNT) may add up to at
 * most MAX_SCHEMA_REPETITIONS: about 45 ms and 7 MB; a schema past it is refused, naming the count that crossed it.
 */
export const MAX_SCHEMA_REPETITIONS = 32_768
const GRAMMAR_EXPANDED_COUNT = 2000
/** What converting one schema carries along: the names its $refs may point at, and its counts so far. */
interface Conversion { readonly defNames: ReadonlySet<string>, repetitions: number }
const PRIMITIVE_TYPES = new Set(['string', 'number', 'integer', 'boolean', 'null'])
const TYPES = new Set([...PRIMITIVE_TYPES, 'object', 'array'])
/** Formats node-llama-cpp's grammar writes out. */
const STRING_FORMATS = new Set(['date-time', 'time', 'date'])
/** Formats no grammar here writes, checked on the output instead (as CHECKED_ON_OUTPUT); any other format is refused. */
const FORMATS_CHECKED_ON_OUTPUT: Record<string, RegExp> = {
  email: /^[^\s@]+@[^\s@]+\.[^\s@]+$/u,
  uuid: /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i,
  uri: /^[a-z][a-z0-9+.-]*:[^\s]*$/i,
  hostname: /^(?=.{1,253}$)[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$/i,
  ipv4: /^((25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)$/
}
// Keywords that only describe; dropping them cannot make valid output invalid.
const ANNOTATIONS = new Set([
  '$schema', '$id', '$comment', 'title', 'description', 'default', 'examples', 'deprecated', 'readOnly', 'writeOnly'
])
/**
 * Keywords a grammar here cannot express, checked on the output instead (`outputViolation`): an answer or a tool call
 * that breaks one fails rather than reach the caller. Bounds that cannot constrain a JSON number the grammar admits
 * (the safe-integer range, which zod writes on every integer) are no constraint at all.
 */
const CHECKED_ON_OUTPUT: Record<string, readonly string[]> = {
  number: ['minimum', 'maximum', 'exclusiveMinimum', 'exclusiveMaximum'],
  integer: ['minimum', 'maximum', 'exclusiveMinimum', 'exclusiveMaximum'],
  string: ['pattern']
}
const KEYWORDS_BY_TYPE: Record<string, Set<string>> = {
  object: new Set(['properties', 'required', 'additionalProperties', 'minProperties', 'maxProperties']),
  array: new Set(['items', 'prefixItems', 'minItems', 'maxItems']),
  string: new Set(['minLength', 'maxLength', 'format', ...CHECKED_ON_OUTPUT.string]),
  number: new Set(CHECKED_ON_OUTPUT.number),
  integer: new Set(CHECKED_ON_OUTPUT.integer)
}
const ANY_VALUE: GbnfJsonSchema = {
  oneOf: [{ type: ['string', 'number', 'boolean', 'null'] }, { type: 'object', additionalProperties: true }, { type: 'array' }]
}

type SchemaObject = Record<string, unknown>

/** Checks a caller's JSON Schema and rewrites it into the subset node-llama-cpp's grammar compiler reads correctly. */
export function toGrammarSchema (schema: unknown, param: string): GbnfJsonSchema {
  if (!isSchemaObject(schema)) throw invalid(param, 'must be a JSON Schema object')
  const defs = schema.$defs ?? schema.definitions
  if (defs !== undefined && !isSchemaObject(defs)) throw invalid(`${param}.$defs`, 'must be an object of schemas')
  const ctx: Conversion = { defNames: new Set(Object.keys(defs ?? {})), repetitions: 0 }
  const root = convert({ ...schema, $defs: undefined, definitions: undefined }, param, 0, ctx)
  if (defs === undefined) return root
  const convertedDefs: Record<string, GbnfJsonSchema> = { }
  for (const [name, def] of Object.entries(defs)) convertedDefs[name] = convert(def, `${param}.$defs.${name}`, 1, ctx)
  // $defs sits beside a oneOf or a typed schema; wrapping keeps it legal whatever the root's own shape is
  return { oneOf: [root], $defs: convertedDefs } as GbnfJsonSchema
}

function convert (schema: unknown, path: string, depth: number, ctx: Conversion): GbnfJsonSchema {
  if (depth > MAX_SCHEMA_DEPTH) throw invalid(path, `nests deeper than ${MAX_SCHEMA_DEPTH} levels`)
  if (schema === true) return ANY_VALUE
  if (!isSchemaObject(schema)) throw invalid(path, 'must be a JSON Schema object')
  const s = stripAnnotations(schema)
  if (Object.keys(s).length === 0) return ANY_VALUE

  if (s.$ref !== undefined) {
    only(s, path, ['$ref'])
    const match = typeof s.$ref === 'string' ? /^#\/(?:\$defs|definitions)\/([^/]+)$/.exec(s.$ref) : null
    if (match == null || !ctx.defNames.has(match[1])) throw invalid(`${path}.$ref`, 'must point at an entry of the root $defs')
    return { $ref: `#/$defs/${match[1]}` } as GbnfJsonSchema
  }
  if (s.const !== undefined) {
    only(s, path, ['const', 'type'])
    if (!isPrimitive(s.const)) throw invalid(`${path}.const`, 'must be a string, number, boolean or null')
    return { const: s.const }
  }
  if (s.enum !== undefined) {
    only(s, path, ['enum', 'type'])
    if (!Array.isArray(s.enum) || s.enum.length === 0 || !s.enum.every(isPrimitive)) {
      throw invalid(`${path}.enum`, 'must be a non-empty array of strings, numbers, booleans or nulls')
    }
    return { enum: s.enum }
  }
  const alternatives = s.anyOf ?? s.oneOf
  if (alternatives !== undefined) {
    only(s, path, [s.anyOf !== undefined ? 'anyOf' : 'oneOf'])
    if (!Array.isArray(alternatives) || alternatives.length === 0) throw invalid(path, 'anyOf/oneOf must be a non-empty array')
    return { oneOf: alternatives.map((item, i) => convert(item, `${path}.oneOf[${i}]`, depth + 1, ctx)) }
  }

  const type = s.type ?? impliedType(s)
  if (type === undefined) {
    only(s, path, []) // names the first keyword we cannot compile (allOf, not, if, ...)
  }
  if (Array.isArray(type)) {
    if (type.length === 0 || !type.every((t) => typeof t === 'string' && TYPES.has(t))) throw invalid(`${path}.type`, 'names an unknown type')
    only(s, path, ['type', ...type.flatMap((t: string) => [...(KEYWORDS_BY_TYPE[t] ?? [])])])
    if (Object.keys(s).length === 1 && type.every((t) => PRIMITIVE_TYPES.has(t))) return { type: type as Array<'string'> }
    // one alternative per type, each with the keywords that apply to it (minLength to the string, properties to the object)
    return {
      oneOf: type.map((t: string) => convert({ type: t, ...pick(s, [...(KEYWORDS_BY_TYPE[t] ?? [])]) }, path, depth + 1, ctx))
    }
  }
  if (typeof type !== 'string' || !TYPES.has(type)) throw invalid(`${path}.type`, 'must be one of ' + [...TYPES].join(', '))
  only(s, path, ['type', ...(KEYWORDS_BY_TYPE[type] ?? [])])
  if (type === 'object') return convertObject(s, path, depth, ctx)
  if (type === 'array') return convertArray(s, path, depth, ctx)
  if (type === 'number' || type === 'integer') {
    for (const key of CHECKED_ON_OUTPUT[type]) {
      if (s[key] !== undefined && (typeof s[key] !== 'number' || !Number.isFinite(s[key]))) throw invalid(`${path}.${key}`, 'must be a number')
    }
    // An integer between near bounds is one of few values: the grammar names them all, and so enforces the bounds
    const range = type === 'integer' ? integerRange(s, path) : null
    if (range != null) return { enum: Array.from({ length: range.max - range.min + 1 }, (_, i) => range.min + i) }
    const grid = type === 'number' ? numberGrid(s, path) : null
    if (grid != null) return { enum: grid }
    return { type }
  }
  if (type === 'string') {
    checkCount(s, path, ['minLength', 'maxLength'], ctx)
    if (s.pattern !== undefined) compilePattern(s.pattern, `${path}.pattern`)
    // `format`: the grammar writes out the ones it knows, the output is checked for a few common others, and any other
    // is refused: a format accepted and not held would be a promise broken
    if (s.format !== undefined && !(typeof s.format === 'string' && (STRING_FORMATS.has(s.format) || Object.hasOwn(FORMATS_CHECKED_ON_OUTPUT, s.format)))) {
      throw invalid(`${path}.format`, `is not one of the formats held here (${[...STRING_FORMATS, ...Object.keys(FORMATS_CHECKED_ON_OUTPUT)].join(', ')})`)
    }
    const format = typeof s.format === 'string' && STRING_FORMATS.has(s.format) ? { format: s.format } : { }
    return { type: 'string', ...pick(s, ['minLength', 'maxLength']), ...format } as GbnfJsonSchema
  }
  return { type: type as 'boolean' }
}

/** Integers in a range this short are written out in the grammar (`integerRange`). */
export const MAX_ENUMERATED_INTEGERS = 256

/** The bounds of an integer schema, when both are given and at most MAX_ENUMERATED_INTEGERS integers lie between. */
function integerRange (s: SchemaObject, path: string): { min: number, max: number } | null {
  const lows = [typeof s.minimum === 'number' ? Math.ceil(s.minimum) : null, typeof s.exclusiveMinimum === 'number' ? Math.floor(s.exclusiveMinimum) + 1 : null].filter((v) => v != null)
  const highs = [typeof s.maximum === 'number' ? Math.floor(s.maximum) : null, typeof s.exclusiveMaximum === 'number' ? Math.ceil(s.exclusiveMaximum) - 1 : null].filter((v) => v != null)
  if (lows.length === 0 || highs.length === 0) return null
  const min = Math.max(...lows)
  const max = Math.min(...highs)
  if (max < min) throw invalid(path, `has no integer between its bounds (${min} to ${max})`)
  return max - min < MAX_ENUMERATED_INTEGERS ? { min, max } : null
}

/** Most values a bounded number is written out as (`numberGrid`). */
export const MAX_NUMBER_GRID = 201

/**
 * A number between two finite bounds (a score from 0 to 1, a temperature from -50 to 50) as the evenly spaced values
 * between them, on the coarsest power-of-ten step that gives at least 100 of them (0 to 1: 0, 0.01, … 1), so the
 * grammar itself holds the bounds. The answer is then one of those values: a number finer than the step cannot be
 * given. Null for a number with one bound or none, checked on the output instead.
 */
function numberGrid (s: SchemaObject, path: string): number[] | null {
  const low = typeof s.exclusiveMinimum === 'number' ? { value: s.exclusiveMinimum, open: true } : typeof s.minimum === 'number' ? { value: s.minimum, open: false } : null
  const high = typeof s.exclusiveMaximum === 'number' ? { value: s.exclusiveMaximum, open: true } : typeof s.maximum === 'number' ? { value: s.maximum, open: false } : null
  if (low == null || high == null || Math.abs(low.value) >= Number.MAX_SAFE_INTEGER || Math.abs(high.value) >= Number.MAX_SAFE_INTEGER) return null
  if (high.value < low.value || (high.value === low.value && (low.open || high.open))) throw invalid(path, `has no number between its bounds (${low.value} to ${high.value})`)
  if (high.value === low.value) return [low.value]
  const exponent = Math.floor(Math.log10((high.value - low.value) / 100))
  const step = 10 ** exponent
  const decimals = Math.max(0, -exponent)
  const start = Math.ceil(low.value / step - 1e-9)
  // A step too fine for the bounds' magnitude (1e6 to 1e6 + 1e-8) cannot be counted in safe integers or written with
  // toFixed: such a number is checked on the output instead
  if (decimals > 100 || !Number.isSafeInteger(start) || !Number.isSafeInteger(start + GRID_STEPS_TRIED)) return null
  const round = (value: number): number => Number(value.toFixed(decimals))
  const values: number[] = []
  // Bounded by the count, not by the values: a value rounded onto a bound is skipped, at most a few of them
  for (let i = start; i <= start + GRID_STEPS_TRIED && values.length <= MAX_NUMBER_GRID; i++) {
    const value = round(i * step)
    if (value > high.value || (high.open && value >= high.value)) break
    if (value < low.value || (low.open && value <= low.value)) continue
    values.push(value)
  }
  return values.length > 0 && values.length <= MAX_NUMBER_GRID ? values : null
}

/** Steps `numberGrid` tries: the most values it writes, and a few skipped where rounding lands on or outside a bound. */
const GRID_STEPS_TRIED = MAX_NUMBER_GRID + 8

function convertObject (s: SchemaObject, path: string, depth: number, ctx: Conversion): GbnfJsonSchema {
  checkCount(s, path, ['minProperties', 'maxProperties'], ctx)
  if (s.properties !== undefined && !isSchemaObject(s.properties)) throw invalid(`${path}.properties`, 'must be an object of schemas')
  if (s.required !== undefined && !(Array.isArray(s.required) && s.required.every((r) => typeof r === 'string'))) {
    throw invalid(`${path}.required`, 'must be an array of property names')
  }
  const properties: Record<string, GbnfJsonSchema> = { }
  for (const [name, sub] of Object.entries(s.properties ?? {})) {
    properties[name] = convert(sub, `${path}.properties.${name}`, depth + 1, ctx)
  }
  const extra = s.additionalProperties
  // JSON Schema allows any extra property by default; node-llama-cpp allows none. With no properties named,
  // "none" would force `{}`, so we keep the schema's meaning; with properties named, forbidding extras still
  // yields only valid objects.
  const additionalProperties = extra === undefined
    ? s.properties === undefined
    : typeof extra === 'boolean' ? extra : convert(extra, `${path}.additionalProperties`, depth + 1, ctx)
  return {
    type: 'object',
    ...(s.properties !== undefined ? { properties } : {}),
    ...(s.required !== undefined ? { required: s.required as string[] } : {}),
    additionalProperties,
    ...pick(s, ['minProperties', 'maxProperties'])
  } as GbnfJsonSchema
}

function convertArray (s: SchemaObject, path: string, depth: number, ctx: Conversion): GbnfJsonSchema {
  checkCount(s, path, ['minItems', 'maxItems'], ctx)
  if (s.prefixItems !== undefined && !Array.isArray(s.prefixItems)) throw invalid(`${path}.prefixItems`, 'must be an array of schemas')
  return {
    type: 'array',
    ...(s.items !== undefined ? { items: convert(s.items, `${path}.items`, depth + 1, ctx) } : {}),
    ...(Array.isArray(s.prefixItems)
      ? { prefixItems: s.prefixItems.map((item, i) => convert(item, `${path}.prefixItems[${i}]`, depth + 1, ctx)) }
      : {}),
    ...pick(s, ['minItems', 'maxItems'])
  } as GbnfJsonSchema
}

/** JSON Schema lets `type` go unsaid; `{ properties: {...} }` is an object schema in practice. */
function impliedType (s: SchemaObject): string | undefined {
  if (['properties', 'required', 'additionalProperties'].some((key) => key in s)) return 'object'
  if (['items', 'prefixItems'].some((key) => key in s)) return 'array'
  return undefined
}

function only (s: SchemaObject, path: string, allowed: readonly string[]): void {
  for (const key of Object.keys(s)) {
    if (!allowed.includes(key)) throw invalid(`${path}.${key}`, 'is not supported for constrained output here')
  }
}

function checkCount (s: SchemaObject, path: string, keys: readonly string[], ctx: Conversion): void {
  for (const key of keys) {
    const value = s[key]
    if (value !== undefined && !(Number.isSafeInteger(value) && (value as number) >= 0)) {
      throw invalid(`${path}.${key}`, 'must be a non-negative integer')
    }
    if (key.startsWith('min') && typeof value === 'number' && value > MAX_SCHEMA_LEAST_COUNT) {
      throw invalid(`${path}.${key}`, `is ${value}; constrained output can require at most ${MAX_SCHEMA_LEAST_COUNT}`)
    }
    if (typeof value === 'number' && value <= GRAMMAR_EXPANDED_COUNT) ctx.repetitions += value
    if (ctx.repetitions > MAX_SCHEMA_REPETITIONS) {
      throw invalid(`${path}.${key}`, `brings the schema's length and count bounds to more than ${MAX_SCHEMA_REPETITIONS} in all, more than constrained output can compile`)
    }
  }
}

function stripAnnotations (schema: SchemaObject): SchemaObject {
  return Object.fromEntries(Object.entries(schema).filter(([key, value]) => value !== undefined && !ANNOTATIONS.has(key)))
}

function pick (s: SchemaObject, keys: readonly string[]): SchemaObject {
  return Object.fromEntries(keys.filter((key) => s[key] !== undefined).map((key) => [key, s[key]]))
}

function isSchemaObject (value: unknown): value is SchemaObject {
  return typeof value === 'object' && value !== null && !Array.isArray(value)
}

function isPrimitive (value: unknown): value is string | number | boolean | null {
  return value === null || ['string', 'number', 'boolean'].includes(typeof value)
}

function invalid (path: string, problem: string): InvalidGenerationRequestError {
  return new InvalidGenerationRequestError(`${path} ${problem}`, path)
}

/** Most schema-and-value steps one answer's check may take (`outputViolation`): real schemas take a few hundred. */
export const MAX_OUTPUT_CHECK_STEPS = 100_000
/**
 * Most time one answer's `pattern` checks may take in all, in ms. A caller's regular expression may backtrack for
 * longer than the node can wait (`^(a|a)*$`, or `.*` ten times, on a long enough answer); each one runs under this
 * deadline (node:vm's timeout, which stops a running match), on the event loop for no longer than this.
 */
export const MAX_PATTERN_CHECK_MS = 250

/**
 * The first break of a keyword the grammar could not enforce (CHECKED_ON_OUTPUT) in `value`, generated under
 * `schema` (the caller's, before toGrammarSchema): a message naming where, or null. Everything else in the schema
 * the grammar enforced already. An answer the check cannot finish within MAX_OUTPUT_CHECK_STEPS steps or
 * MAX_PATTERN_CHECK_MS of pattern matching is a break too (named so): an answer is never passed on unchecked.
 */
export function outputViolation (schema: unknown, value: unknown, at = ''): string | null {
  const root = at === '' ? '(root)' : at
  const check: OutputCheck = { defs: isSchemaObject(schema) ? (schema.$defs ?? schema.definitions) as SchemaObject | undefined : undefined, steps: 0, patternMs: 0 }
  try {
    return violation(schema, value, root, check, 0)
  } catch (err) {
    if (err instanceof CheckTooLong) return `${root} could not be checked against the schema: ${err.message}`
    throw err
  }
}

interface OutputCheck { defs: SchemaObject | undefined, steps: number, patternMs: number }

/** The check ran out of its steps or its pattern time. */
class CheckTooLong extends Error {}

function violation (schema: unknown, value: unknown, at: string, check: OutputCheck, depth: number): string | null {
  if (!isSchemaObject(schema) || depth > MAX_SCHEMA_DEPTH * 2) return null
  if (++check.steps > MAX_OUTPUT_CHECK_STEPS) throw new CheckTooLong(`it takes more than ${MAX_OUTPUT_CHECK_STEPS} steps`)
  if (typeof schema.$ref === 'string') {
    const name = /^#\/(?:\$defs|definitions)\/([^/]+)$/.exec(schema.$ref)?.[1]
    return name == null ? null : violation(check.defs?.[name], value, at, check, depth + 1)
  }
  const alternatives = schema.anyOf ?? schema.oneOf
  if (Array.isArray(alternatives)) {
    // The grammar let the value through one alternative of its type; the value breaks the schema only if every such one does
    let first: string | null = null
    for (const alternative of alternatives) {
      const found = violation(alternative, value, at, check, depth + 1)
      if (found == null) return null
      first ??= found
    }
    return first
  }
  // Within anyOf, an alternative of another type is not the one the value went through
  const types = typeof schema.type === 'string' ? [schema.type] : Array.isArray(schema.type) ? schema.type : null
  if (types != null && !types.some((type) => type === jsonType(value) || (type === 'number' && jsonType(value) === 'integer'))) return `${at} is not of type ${types.join(' or ')}`
  if (typeof value === 'number') {
    const { minimum, maximum, exclusiveMinimum, exclusiveMaximum } = schema
    if (typeof minimum === 'number' && value < minimum) return `${at} is ${value}, below the minimum ${minimum}`
    if (typeof maximum === 'number' && value > maximum) return `${at} is ${value}, above the maximum ${maximum}`
    if (typeof exclusiveMinimum === 'number' && value <= exclusiveMinimum) return `${at} is ${value}, not above ${exclusiveMinimum}`
    if (typeof exclusiveMaximum === 'number' && value >= exclusiveMaximum) return `${at} is ${value}, not below ${exclusiveMaximum}`
    return null
  }
  if (typeof value === 'string') {
    if (typeof schema.pattern === 'string' && !matches(compilePattern(schema.pattern, `${at}.pattern`), value, check)) return `${at} does not match the pattern ${schema.pattern}`
    const format = typeof schema.format === 'string' && Object.hasOwn(FORMATS_CHECKED_ON_OUTPUT, schema.format) ? FORMATS_CHECKED_ON_OUTPUT[schema.format] : null
    if (format != null && !format.test(value)) return `${at} is not a valid ${String(schema.format)}`
    return null
  }
  if (Array.isArray(value)) {
    const prefix = Array.isArray(schema.prefixItems) ? schema.prefixItems : []
    for (const [i, item] of value.entries()) {
      const found = violation(i < prefix.length ? prefix[i] : schema.items, item, `${at}[${i}]`, check, depth + 1)
      if (found != null) return found
    }
    return null
  }
  if (typeof value === 'object' && value !== null) {
    const properties = isSchemaObject(schema.properties) ? schema.properties : {}
    for (const [key, item] of Object.entries(value)) {
      const found = violation(Object.hasOwn(properties, key) ? properties[key] : schema.additionalProperties, item, `${at}.${key}`, check, depth + 1)
      if (found != null) return found
    }
  }
  return null
}

/** One context for every pattern check: the match runs in it so that its timeout can stop it. */
const patternSandbox = createContext({ pattern: /$/, text: '' })
const patternTest = new Script('pattern.test(text)')

/** Whether `text` matches `pattern`, within what is left of the answer's MAX_PATTERN_CHECK_MS. */
function matches (pattern: RegExp, text: string, check: OutputCheck): boolean {
  const left = Math.floor(MAX_PATTERN_CHECK_MS - check.patternMs)
  if (left < 1) throw new CheckTooLong(`its patterns take more than ${MAX_PATTERN_CHECK_MS} ms to match`)
  patternSandbox.pattern = pattern
  patternSandbox.text = text
  const started = performance.now()
  try {
    return patternTest.runInContext(patternSandbox, { timeout: left }) === true
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ERR_SCRIPT_EXECUTION_TIMEOUT') throw new CheckTooLong(`its patterns take more than ${MAX_PATTERN_CHECK_MS} ms to match`)
    throw err
  } finally {
    check.patternMs += performance.now() - started
    patternSandbox.text = ''
  }
}

function jsonType (value: unknown): string {
  if (value === null) return 'null'
  if (Array.isArray(value)) return 'array'
  if (typeof value === 'number') return Number.isInteger(value) ? 'integer' : 'number'
  return typeof value
}

const PATTERNS_KEPT = 256
const patterns = new Map<string, RegExp>()

/** A schema's `pattern` as a JavaScript RegExp (ECMA-262, as JSON Schema defines it, with Unicode); refused when invalid. */
function compilePattern (pattern: unknown, param: string): RegExp {
  if (typeof pattern !== 'string' || pattern.length > 1024) throw invalid(param, 'must be a regular expression of at most 1024 characters')
  // A quantified group holding a quantifier can take exponential time on a long answer: refused up front (every other
  // pattern's match runs under MAX_PATTERN_CHECK_MS)
  if (/\([^)]*[+*}?][^)]*\)[+*{]/.test(pattern)) throw invalid(param, 'has a repeated group that itself repeats, which is not accepted (it can take exponential time)')
  let compiled = patterns.get(pattern)
  if (compiled == null) {
    try {
      compiled = new RegExp(pattern, 'u')
    } catch {
      throw invalid(param, 'is not a valid regular expression')
    }
    if (patterns.size >= PATTERNS_KEPT) patterns.clear()
    patterns.set(pattern, compiled)
  }
  return compiled
}
