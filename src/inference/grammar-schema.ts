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
 */
export const MAX_SCHEMA_LEAST_COUNT = 1000
/**
 * The largest most count (maxLength, maxItems, maxProperties) written into the grammar. llama.cpp's grammar parser
 * refuses a bounded repetition whose rules times its count pass 2000 (an array repeats a two-symbol group, so
 * `maxItems: 1002` fails; a root string's `maxLength: 2000` too), and reads any count past 2000 as no bound at all:
 * a larger most count is left out of the grammar and checked on the output instead.
 */
const GRAMMAR_WRITTEN_COUNT = 1000
/**
 * llama.cpp writes a bounded repetition `{m,n}` out as about n rules, each kept in memory and built on the event loop
 * when the grammar is made (measured: 1.6 ms and ~0.2 MB per thousand); a least count alone (`{m,}`) costs about an
 * eighth of that, and identical string bounds are one rule (node-llama-cpp names rules by their content). So a
 * schema's counts, each least-and-most pair counted as what it costs, with its listed values (`enum`, and integer
 * ranges and number grids written out here, ENUM_VALUE_REPETITIONS each), may add up to MAX_SCHEMA_REPETITIONS: about
 * 50 ms and 8 MB. Past it, a count is left out of the grammar and checked on the output instead, as are the bounds of
 * a range or grid; an `enum` past it is refused, by name.
 */
export const MAX_SCHEMA_REPETITIONS = 32_768
/** What one listed value costs the grammar, in repetitions (measured: about what four counts cost). */
const ENUM_VALUE_REPETITIONS = 4
/**
 * Most alternatives a grammar may offer where the answer starts (the values of a root `enum`, the branches of a root
 * anyOf, what a root $ref leads to): llama.cpp sets up one parse stack for each when it makes the grammar, comparing
 * each with all the others, on the event loop (measured: 1024 take 9 ms, 4096 60 ms, 16384 a second). A schema with
 * more is refused; the same values under a property cost only their share of MAX_SCHEMA_REPETITIONS.
 */
export const MAX_START_ALTERNATIVES = 4096
/** What converting one schema carries along: the names its $refs may point at, and its grammar budget so far. */
interface Conversion {
  readonly defNames: ReadonlySet<string>
  /** Spent toward MAX_SCHEMA_REPETITIONS. */
  repetitions: number
  /** String bounds counted already: written as one rule however often they appear. */
  readonly stringBounds: Set<string>
  /** Whether a count was left out of the grammar (past the budget), so that the output is checked for counts. */
  countsOnOutput: boolean
}
const PRIMITIVE_TYPES = new Set(['string', 'number', 'integer', 'boolean', 'null'])
const TYPES = new Set([...PRIMITIVE_TYPES, 'object', 'array'])
/** Formats node-llama-cpp's grammar writes out. */
const STRING_FORMATS = new Set(['date-time', 'time', 'date'])
/**
 * Formats no grammar here writes, checked on the output instead (as CHECKED_ON_OUTPUT); any other format is refused.
 * Each runs directly, in time linear in the string: email's lookahead makes sure the domain runs to the end before
 * `[^\s@]+\.` backtracks over it, which would otherwise try every dot again (quadratic).
 */
const FORMATS_CHECKED_ON_OUTPUT: Record<string, RegExp> = {
  email: /^[^\s@]+@(?=[^\s@]*$)[^\s@]+\.[^\s@]+$/u,
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

/**
 * A caller's JSON Schema, checked: the grammar node-llama-cpp compiles (the subset of JSON Schema it reads correctly),
 * and the check of what that grammar does not enforce, for the output made under it.
 */
export interface OutputSchema {
  readonly grammar: GbnfJsonSchema
  /**
   * The first break in `value` of a keyword the grammar did not enforce (CHECKED_ON_OUTPUT, and counts left out of
   * the grammar past its budget): a message naming where (`at`, then the path), or null. An answer the check cannot
   * finish within MAX_OUTPUT_CHECK_STEPS steps or MAX_PATTERN_CHECK_MS of pattern matching is a break too, named so:
   * an answer is never passed on unchecked.
   */
  violation: (value: unknown, at?: string) => string | null
}

/** Checks a caller's JSON Schema; refused naming `param` (and the keyword) when output could not be held to it. */
export function toOutputSchema (schema: unknown, param: string): OutputSchema {
  if (!isSchemaObject(schema)) throw invalid(param, 'must be a JSON Schema object')
  const defs = schema.$defs ?? schema.definitions
  if (defs !== undefined && !isSchemaObject(defs)) throw invalid(`${param}.$defs`, 'must be an object of schemas')
  const ctx: Conversion = { defNames: new Set(Object.keys(defs ?? {})), repetitions: 0, stringBounds: new Set(), countsOnOutput: false }
  const root = convert({ ...schema, $defs: undefined, definitions: undefined }, param, 0, ctx)
  const convertedDefs: Record<string, GbnfJsonSchema> = { }
  for (const [name, def] of Object.entries(defs ?? {})) convertedDefs[name] = convert(def, `${param}.$defs.${name}`, 1, ctx)
  const starts = startAlternatives(root, convertedDefs, new Map())
  if (starts > MAX_START_ALTERNATIVES) {
    throw invalid(param, `offers ${starts} alternatives where the answer starts (enum values, anyOf branches); constrained output takes at most ${MAX_START_ALTERNATIVES} there (put them under a property)`)
  }
  // $defs sits beside a oneOf or a typed schema; wrapping keeps it legal whatever the root's own shape is
  const grammar = defs === undefined ? root : { oneOf: [root], $defs: convertedDefs } as GbnfJsonSchema
  const checks = new OutputChecks(schema, defs, ctx.countsOnOutput)
  return { grammar, violation: (value, at = '') => checks.violation(value, at) }
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
    // Listed values cannot be checked on the output instead
    if (!spend(ctx, s.enum.length * ENUM_VALUE_REPETITIONS)) {
      throw invalid(`${path}.enum`, `brings the schema's listed values and counts to more than ${MAX_SCHEMA_REPETITIONS} in all, more than constrained output can compile`)
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
    const values = range != null ? Array.from({ length: range.max - range.min + 1 }, (_, i) => range.min + i) : type === 'number' ? numberGrid(s, path) : null
    // Past the grammar's budget, the bounds are checked on the output, as for any number
    if (values != null && spend(ctx, values.length * ENUM_VALUE_REPETITIONS)) return { enum: values }
    return { type }
  }
  if (type === 'string') {
    const counts = grammarCounts(s, path, ['minLength', 'maxLength'], ctx, true)
    if (s.pattern !== undefined) compilePattern(s.pattern, `${path}.pattern`)
    // `format`: the grammar writes out the ones it knows, the output is checked for a few common others, and any other
    // is refused: a format accepted and not held would be a promise broken
    if (s.format !== undefined && !(typeof s.format === 'string' && (STRING_FORMATS.has(s.format) || Object.hasOwn(FORMATS_CHECKED_ON_OUTPUT, s.format)))) {
      throw invalid(`${path}.format`, `is not one of the formats held here (${[...STRING_FORMATS, ...Object.keys(FORMATS_CHECKED_ON_OUTPUT)].join(', ')})`)
    }
    const format = typeof s.format === 'string' && STRING_FORMATS.has(s.format) ? { format: s.format } : { }
    return { type: 'string', ...counts, ...format } as GbnfJsonSchema
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
  const counts = grammarCounts(s, path, ['minProperties', 'maxProperties'], ctx, false)
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
    ...counts
  } as GbnfJsonSchema
}

function convertArray (s: SchemaObject, path: string, depth: number, ctx: Conversion): GbnfJsonSchema {
  const counts = grammarCounts(s, path, ['minItems', 'maxItems'], ctx, false)
  if (s.prefixItems !== undefined && !Array.isArray(s.prefixItems)) throw invalid(`${path}.prefixItems`, 'must be an array of schemas')
  return {
    type: 'array',
    ...(s.items !== undefined ? { items: convert(s.items, `${path}.items`, depth + 1, ctx) } : {}),
    ...(Array.isArray(s.prefixItems)
      ? { prefixItems: s.prefixItems.map((item, i) => convert(item, `${path}.prefixItems[${i}]`, depth + 1, ctx)) }
      : {}),
    ...counts
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

/**
 * A least and a most count (`keys`) checked, and what of them the grammar writes: both; the least only, when the
 * most is past GRAMMAR_WRITTEN_COUNT; or, past the grammar's budget, neither. What the grammar leaves out is checked
 * on the output. `shared`: identical bounds are one rule (strings).
 */
function grammarCounts (s: SchemaObject, path: string, keys: readonly [string, string], ctx: Conversion, shared: boolean): SchemaObject {
  for (const key of keys) {
    const value = s[key]
    if (value !== undefined && !(Number.isSafeInteger(value) && (value as number) >= 0)) {
      throw invalid(`${path}.${key}`, 'must be a non-negative integer')
    }
  }
  const [least, most] = keys.map((key) => s[key] as number | undefined)
  if (least !== undefined && least > MAX_SCHEMA_LEAST_COUNT) {
    throw invalid(`${path}.${keys[0]}`, `is ${least}; constrained output can require at most ${MAX_SCHEMA_LEAST_COUNT}`)
  }
  const writesMost = most !== undefined && most <= GRAMMAR_WRITTEN_COUNT
  if (most !== undefined && !writesMost) ctx.countsOnOutput = true
  const written = pick(s, writesMost ? keys : [keys[0]])
  const cost = writesMost ? most : Math.ceil((least ?? 0) / 8)
  const bounds = `${least}-${writesMost ? most : ''}`
  if (cost === 0 || (shared && ctx.stringBounds.has(bounds))) return written
  if (!spend(ctx, cost)) {
    ctx.countsOnOutput = true
    return {}
  }
  if (shared) ctx.stringBounds.add(bounds)
  return written
}

/** Spends `repetitions` of the grammar's budget (MAX_SCHEMA_REPETITIONS); false, spending nothing, when they do not fit. */
function spend (ctx: Conversion, repetitions: number): boolean {
  if (ctx.repetitions + repetitions > MAX_SCHEMA_REPETITIONS) return false
  ctx.repetitions += repetitions
  return true
}

/**
 * The alternatives a converted schema offers where its value starts (MAX_START_ALTERNATIVES): an enum's distinct
 * values, the sum over a oneOf's branches (branches that are the same $ref set up once, so are counted once), what a
 * $ref leads to (each def counted once; a $ref back to a def still being counted adds nothing), and one for anything
 * else (a type list: one per type).
 */
function startAlternatives (schema: GbnfJsonSchema, defs: Record<string, GbnfJsonSchema>, counted: Map<string, number>): number {
  const s = schema as SchemaObject
  if (Array.isArray(s.enum)) return new Set(s.enum).size
  if (Array.isArray(s.oneOf)) {
    const refs = new Set<string>()
    let sum = 0
    for (const branch of s.oneOf as SchemaObject[]) {
      if (typeof branch.$ref === 'string' && refs.has(branch.$ref)) continue
      if (typeof branch.$ref === 'string') refs.add(branch.$ref)
      sum += startAlternatives(branch as GbnfJsonSchema, defs, counted)
    }
    return sum
  }
  if (typeof s.$ref === 'string') {
    const name = s.$ref.slice('#/$defs/'.length)
    const known = counted.get(name)
    if (known != null) return known
    counted.set(name, 0)
    const count = Object.hasOwn(defs, name) ? startAlternatives(defs[name], defs, counted) : 1
    counted.set(name, count)
    return count
  }
  return Array.isArray(s.type) ? s.type.length : 1
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

/** Most schema-and-value steps one walk of an answer may take (`OutputChecks`): real schemas take a few hundred. */
export const MAX_OUTPUT_CHECK_STEPS = 100_000
/**
 * Most time one answer's `pattern` checks may take in all, in ms. A caller's regular expression may backtrack for
 * longer than the node can wait (`^(a|a)*$`, or `.*` ten times, on a long enough answer), so the matches run under
 * this deadline (node:vm's timeout, which stops a running match), on the event loop for no longer than this.
 */
export const MAX_PATTERN_CHECK_MS = 250
/**
 * Most walks of one answer. Starting node:vm's watchdog costs about 0.2 ms, too much for each of the thousands of
 * strings an answer may hold, so a walk takes every pattern it meets to match and asks for the match, and the matches
 * it asked for then run together, under one deadline. Where one did not match, an anyOf may go on to another
 * alternative, whose patterns the next walk asks for; past this many walks, a pattern still unknown runs at once.
 */
const MAX_CHECK_WALKS = 4
/** Checked on the output when the grammar left counts out (past its budget). */
const COUNT_KEYWORDS = ['minLength', 'maxLength', 'minItems', 'maxItems', 'minProperties', 'maxProperties']

/** The check of an answer or a call's arguments against the keywords their grammar did not enforce. */
class OutputChecks {
  readonly #schema: SchemaObject
  readonly #defs: SchemaObject | undefined
  /** Whether counts are checked too (some were left out of the grammar). */
  readonly #counts: boolean
  /** Whether any definition holds a checked keyword: what every $ref is taken to hold. */
  readonly #refsHold: boolean
  /** Per schema object: whether it holds a checked keyword anywhere under it. */
  readonly #holds = new WeakMap<object, boolean>()

  constructor (schema: SchemaObject, defs: unknown, counts: boolean) {
    this.#schema = schema
    this.#defs = isSchemaObject(defs) ? defs : undefined
    this.#counts = counts
    this.#refsHold = Object.values(this.#defs ?? {}).some((def) => this.#scan(def, false, 0))
  }

  violation (value: unknown, at: string): string | null {
    const root = at === '' ? '(root)' : at
    if (!this.#holdsCheck(this.#schema)) return null // nothing anywhere the grammar did not hold already
    const walk: Walk = { steps: 0, matched: new Map(), asked: [], patternMs: 0, direct: false }
    try {
      for (let walks = 1; ; walks++) {
        walk.steps = 0
        walk.direct = walks >= MAX_CHECK_WALKS
        const found = this.#violation(this.#schema, value, root, walk, 0, true)
        if (walk.asked.length === 0) return found
        matchAsked(walk)
      }
    } catch (err) {
      if (err instanceof CheckTooLong) return `${root} could not be checked against the schema: ${err.message}`
      if (err instanceof RangeError) return `${root} could not be checked against the schema: it nests too deeply`
      throw err
    }
  }

  /** Whether `schema` holds a checked keyword anywhere under it (memoized; a $ref holds what any definition does). */
  #holdsCheck (schema: unknown): boolean {
    if (!isSchemaObject(schema)) return false
    let holds = this.#holds.get(schema)
    if (holds === undefined) {
      holds = this.#scan(schema, this.#refsHold, 0)
      this.#holds.set(schema, holds)
    }
    return holds
  }

  #scan (schema: unknown, refs: boolean, depth: number): boolean {
    if (!isSchemaObject(schema)) return false
    if (depth > MAX_SCHEMA_DEPTH * 2) return true
    if (typeof schema.$ref === 'string' && refs) return true
    if (Object.values(CHECKED_ON_OUTPUT).some((keys) => keys.some((key) => schema[key] !== undefined))) return true
    if (typeof schema.format === 'string' && Object.hasOwn(FORMATS_CHECKED_ON_OUTPUT, schema.format)) return true
    if (this.#counts && COUNT_KEYWORDS.some((key) => schema[key] !== undefined)) return true
    const subschemas = [
      ...(isSchemaObject(schema.properties) ? Object.values(schema.properties) : []),
      schema.additionalProperties, schema.items,
      ...[schema.prefixItems, schema.anyOf, schema.oneOf].flatMap((list) => Array.isArray(list) ? list as unknown[] : [])
    ]
    return subschemas.some((sub) => this.#scan(sub, refs, depth + 1))
  }

  /**
   * The first break under `schema`. `chosen`: the grammar made `value` through this schema, not through one
   * alternative of several, so a schema holding no checked keyword has nothing to add.
   */
  #violation (schema: unknown, value: unknown, at: string, walk: Walk, depth: number, chosen: boolean): string | null {
    if (!isSchemaObject(schema) || depth > MAX_SCHEMA_DEPTH * 2) return null
    if (chosen && !this.#holdsCheck(schema)) return null
    if (++walk.steps > MAX_OUTPUT_CHECK_STEPS) throw new CheckTooLong(`it takes more than ${MAX_OUTPUT_CHECK_STEPS} steps`)
    if (typeof schema.$ref === 'string') {
      const name = /^#\/(?:\$defs|definitions)\/([^/]+)$/.exec(schema.$ref)?.[1]
      return name == null ? null : this.#violation(this.#defs?.[name], value, at, walk, depth + 1, chosen)
    }
    const alternatives = schema.anyOf ?? schema.oneOf
    if (Array.isArray(alternatives)) {
      // The grammar let the value through one alternative of its type; the value breaks the schema only if every such one does
      let first: string | null = null
      for (const alternative of alternatives) {
        const found = this.#violation(alternative, value, at, walk, depth + 1, chosen && alternatives.length === 1)
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
      const counted = this.#counts ? countViolation(schema, 'minLength', 'maxLength', codePoints(value), at, 'characters') : null
      if (counted != null) return counted
      if (typeof schema.pattern === 'string' && !matches(compilePattern(schema.pattern, `${at}.pattern`), value, walk)) return `${at} does not match the pattern ${schema.pattern}`
      const format = typeof schema.format === 'string' && Object.hasOwn(FORMATS_CHECKED_ON_OUTPUT, schema.format) ? FORMATS_CHECKED_ON_OUTPUT[schema.format] : null
      if (format != null && !format.test(value)) return `${at} is not a valid ${String(schema.format)}`
      return null
    }
    if (Array.isArray(value)) {
      const counted = this.#counts ? countViolation(schema, 'minItems', 'maxItems', value.length, at, 'items') : null
      if (counted != null) return counted
      const prefix = Array.isArray(schema.prefixItems) ? schema.prefixItems : []
      // Items the grammar made through a schema with nothing to check are not visited one by one
      if (chosen && !this.#holdsCheck(schema.items) && !prefix.some((item) => this.#holdsCheck(item))) return null
      for (const [i, item] of value.entries()) {
        const found = this.#violation(i < prefix.length ? prefix[i] : schema.items, item, `${at}[${i}]`, walk, depth + 1, chosen)
        if (found != null) return found
      }
      return null
    }
    if (typeof value === 'object' && value !== null) {
      const counted = this.#counts ? countViolation(schema, 'minProperties', 'maxProperties', Object.keys(value).length, at, 'properties') : null
      if (counted != null) return counted
      const properties = isSchemaObject(schema.properties) ? schema.properties : {}
      for (const [key, item] of Object.entries(value)) {
        const found = this.#violation(Object.hasOwn(properties, key) ? properties[key] : schema.additionalProperties, item, `${at}.${key}`, walk, depth + 1, chosen)
        if (found != null) return found
      }
    }
    return null
  }
}

/** One answer's check as it goes: its steps in this walk, and its pattern matches, known or asked for. */
interface Walk {
  steps: number
  /** Per pattern, per string: whether it matches, or null while asked for. */
  matched: Map<RegExp, Map<string, boolean | null>>
  /** Matches this walk asked for, to run together after it. */
  asked: Array<[RegExp, string]>
  patternMs: number
  /** Run what is not known yet at once (the last walk) instead of asking for it. */
  direct: boolean
}

/** The check ran out of its steps or its pattern time. */
class CheckTooLong extends Error {}

/** `what` (a length, a number of items or properties) against the schema's `least` and `most` keywords. */
function countViolation (schema: SchemaObject, least: string, most: string, count: number, at: string, what: string): string | null {
  if (typeof schema[least] === 'number' && count < schema[least]) return `${at} has ${count} ${what}, fewer than ${least} ${schema[least]}`
  if (typeof schema[most] === 'number' && count > schema[most]) return `${at} has ${count} ${what}, more than ${most} ${schema[most]}`
  return null
}

/** A string's length as JSON Schema counts it: in code points. */
function codePoints (text: string): number {
  let count = 0
  for (let i = 0; i < text.length; i++) {
    const unit = text.charCodeAt(i)
    if (unit >= 0xd800 && unit <= 0xdbff && i + 1 < text.length) {
      const next = text.charCodeAt(i + 1)
      if (next >= 0xdc00 && next <= 0xdfff) i++
    }
    count++
  }
  return count
}

/** Whether `text` matches `pattern`: known from an earlier walk, asked for (taken to match for now), or run at once. */
function matches (pattern: RegExp, text: string, walk: Walk): boolean {
  let byText = walk.matched.get(pattern)
  if (byText == null) walk.matched.set(pattern, byText = new Map())
  const known = byText.get(text)
  if (known != null) return known
  if (!walk.direct) {
    if (known === undefined) walk.asked.push([pattern, text])
    byText.set(text, null)
    return true
  }
  walk.asked = [[pattern, text]]
  matchAsked(walk)
  return byText.get(text) === true
}

/** One context for every pattern check: the matches run in it so that its timeout can stop them. */
const patternSandbox = createContext({ asked: [] as Array<[RegExp, string]> })
const patternTests = new Script('asked.map((pair) => pair[0].test(pair[1]))')

/** Runs the matches `walk` asked for, together, within what is left of the answer's MAX_PATTERN_CHECK_MS. */
function matchAsked (walk: Walk): void {
  const left = Math.floor(MAX_PATTERN_CHECK_MS - walk.patternMs)
  if (left < 1) throw new CheckTooLong(`its patterns take more than ${MAX_PATTERN_CHECK_MS} ms to match`)
  const asked = walk.asked
  walk.asked = []
  patternSandbox.asked = asked
  const started = performance.now()
  let results: unknown[]
  try {
    results = patternTests.runInContext(patternSandbox, { timeout: left }) as unknown[]
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ERR_SCRIPT_EXECUTION_TIMEOUT') throw new CheckTooLong(`its patterns take more than ${MAX_PATTERN_CHECK_MS} ms to match`)
    throw err
  } finally {
    walk.patternMs += performance.now() - started
    patternSandbox.asked = []
  }
  asked.forEach(([pattern, text], i) => walk.matched.get(pattern)?.set(text, results[i] === true))
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
