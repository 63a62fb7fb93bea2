import { createContext, Script } from 'node:vm'
import type { GbnfJsonSchema } from 'node-llama-cpp'
import { InvalidGenerationRequestError } from './errors.ts'
import { jsonSize } from '../wire/index.ts'

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
 * The largest count written into the grammar, by what it counts. llama.cpp's grammar parser refuses a repetition
 * whose count times the rules new in the repeated group passes 2000: a string's characters repeat up to two (a
 * root `maxLength: 2000` fails), an array's items or an object's properties up to three (the comma, the item, and a
 * `prefixItems` or `additionalProperties` rule: `maxItems: 668` fails); and it reads any most count past 2000 as no
 * bound at all. A count past these is left out of the grammar and checked on the output instead.
 */
const GRAMMAR_WRITTEN_COUNT = { string: 1000, collection: 666 }
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
 * Most alternatives a grammar may offer at one place of the answer (an `enum`'s values, the branches of an anyOf
 * summed, nested ones multiplied through their $refs). llama.cpp sets up a parse stack for each and compares it with
 * all the others when it makes the grammar, where the answer starts (measured: 1024 take 9 ms, 4096 60 ms, 16384 a
 * second; anyOfs of four $refs nested ten deep, 4^10 ways, 100 ms, thirty deep for ever), and tries each for every
 * token sampled there (4096: 0.3 s, 8192: 1.2 s of the model's time). A schema with more at one place is refused.
 */
export const MAX_ALTERNATIVES = 1024
/**
 * Most subschemas one schema may hold, its $defs included, weighed by what they cost (ANY_VALUE_WEIGHT).
 * node-llama-cpp writes its grammar, and llama.cpp parses it, on the event loop, in time that grows with them
 * (measured: 5,000 properties take about 100 ms, 10,000 nested ones 250 ms); real schemas hold tens to hundreds
 * (OpenAI takes up to 5,000 properties).
 */
export const MAX_SCHEMA_SUBSCHEMAS = 4096
/**
 * Most JSON values (keywords, their values, enum members, names) one schema may hold: what the limits on subschemas,
 * alternatives and enums allow comes far below it, so it refuses only a schema built to be costly to walk.
 */
export const MAX_SCHEMA_VALUES = 65_536
/**
 * Deepest a schema may nest counted through its $refs, each definition's levels added where a $ref leads to it (a
 * recursive definition counted once): node-llama-cpp's grammar writer recurses that deep, and slows down with it
 * (measured: a chain of 500 definitions takes 130 ms, of 2,000 overflows its stack).
 */
export const MAX_REF_NESTING = 4 * MAX_SCHEMA_DEPTH
/**
 * What node-llama-cpp's grammar writer spends on a value of any JSON, in plain subschemas (measured: about 1 ms for
 * `true` or `{}`, half that for an object of any properties, a quarter for an array of any items, against 0.03 ms for a
 * string): these count so many toward MAX_SCHEMA_SUBSCHEMAS.
 */
const ANY_VALUE_WEIGHT = 32
const FREE_OBJECT_WEIGHT = 16
const FREE_ARRAY_WEIGHT = 8

/** Counts `weight` subschemas at `path` toward MAX_SCHEMA_SUBSCHEMAS. */
function grow (ctx: Conversion, weight: number, path: string): void {
  ctx.subschemas += weight
  if (ctx.subschemas > MAX_SCHEMA_SUBSCHEMAS) throw tooManySubschemas(path)
}

function tooManySubschemas (path: string): InvalidGenerationRequestError {
  return invalid(path, `brings the schema to more than ${MAX_SCHEMA_SUBSCHEMAS} subschemas (a value of any JSON counts ${ANY_VALUE_WEIGHT}), more than constrained output can compile`)
}

/** `true` or `{}`: any JSON value. */
function anyValue (ctx: Conversion, path: string): GbnfJsonSchema {
  grow(ctx, ANY_VALUE_WEIGHT - 1, path)
  return ANY_VALUE
}

/** A definition's name, or null for the schema's root. */
type SchemaPart = string | null
/** What converting one schema carries along: the names its $refs may point at, its size and its grammar budget so far. */
interface Conversion {
  readonly defNames: ReadonlySet<string>
  /** Subschemas converted so far, toward MAX_SCHEMA_SUBSCHEMAS. */
  subschemas: number
  /** The part being converted, the deepest level reached in each, and the $refs each holds, at their levels. */
  part: SchemaPart
  readonly deepest: Map<SchemaPart, number>
  readonly refs: Map<SchemaPart, Array<{ depth: number, to: string }>>
  /** Spent toward MAX_SCHEMA_REPETITIONS. */
  repetitions: number
  /** String bounds counted already: written as one rule however often they appear. */
  readonly stringBounds: Set<string>
  /** Whether a count was left out of the grammar (past the budget), so that the output is checked for counts. */
  countsOnOutput: boolean
  /** The distinct patterns met, toward MAX_SCHEMA_PATTERNS. */
  readonly patterns: Set<string>
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
 * Keywords a grammar here cannot express, checked on the output instead (`OutputSchema.violation`): an answer or a tool call
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

export interface OutputSchemaOptions {
  /**
   * What becomes of a keyword no grammar here enforces (`allOf`, `not`, `propertyNames`, `uniqueItems`, `multipleOf`,
   * a `format` not held, …). `refuse` (the default): the schema is refused, naming it, as OpenAI's strict mode does;
   * what response_format asks for is given or refused, never loosened. `leave out`: it is dropped, from the grammar and
   * from the output check alike (`enforceable`), as the real APIs read a tool's parameters when the tool is not
   * strict: a tool from zod or an MCP server must not make every request of its session fail.
   */
  unenforceable?: 'refuse' | 'leave out'
}

/** Checks a caller's JSON Schema; refused naming `param` (and the keyword) when output could not be held to it. */
export function toOutputSchema (given: unknown, param: string, options: OutputSchemaOptions = {}): OutputSchema {
  // Counted before anything walks it, up to the bound only: a megabyte of keys costs a walk that far, not one per pass
  if (jsonSize(given, { maxChars: Number.POSITIVE_INFINITY, maxValues: MAX_SCHEMA_VALUES }) == null) {
    throw invalid(param, `holds more than ${MAX_SCHEMA_VALUES} JSON values, more than constrained output can compile`)
  }
  const schema = options.unenforceable === 'leave out' ? enforceableRoot(given, param) : given
  if (!isSchemaObject(schema)) throw invalid(param, 'must be a JSON Schema object')
  const defs = schema.$defs ?? schema.definitions
  if (defs !== undefined && !isSchemaObject(defs)) throw invalid(`${param}.$defs`, 'must be an object of schemas')
  const ctx: Conversion = {
    defNames: new Set(Object.keys(defs ?? {})), subschemas: 0, part: null, deepest: new Map(), refs: new Map(), repetitions: 0, stringBounds: new Set(), countsOnOutput: false, patterns: new Set()
  }
  const root = convert({ ...schema, $defs: undefined, definitions: undefined }, param, 0, ctx)
  const convertedDefs = Object.fromEntries(Object.entries(defs ?? {}).map(([name, def]) => {
    ctx.part = name
    return [name, convert(def, `${param}.$defs.${name}`, 1, ctx)]
  }))
  checkRefNesting(ctx, param)
  checkAlternatives(root, convertedDefs, param)
  // $defs sits beside a oneOf or a typed schema; wrapping keeps it legal whatever the root's own shape is
  const grammar = defs === undefined ? root : { oneOf: [root], $defs: convertedDefs } as GbnfJsonSchema
  const checks = new OutputChecks(schema, defs, ctx.countsOnOutput)
  return { grammar, violation: (value, at = '') => checks.violation(value, at) }
}

/** A `$ref` convert follows: to an entry of the root `$defs` (or `definitions`). */
const DEF_REF = /^#\/(?:\$defs|definitions)\/([^/]+)$/

/**
 * A schema with what no grammar here enforces left out (`unenforceable: 'leave out'`): its root's and its `$defs`'
 * subschemas through `enforceable`. A `$defs` that is not an object of schemas is left as it is, for toOutputSchema
 * to refuse.
 */
function enforceableRoot (schema: unknown, param: string): unknown {
  if (!isSchemaObject(schema)) return schema
  const defs = schema.$defs ?? schema.definitions
  if (defs !== undefined && !isSchemaObject(defs)) return schema
  const names = new Set(Object.keys(defs ?? {}))
  const kept: Kept = { patterns: new Map(), walked: 0 }
  const root = enforceable({ ...schema, $defs: undefined, definitions: undefined }, names, param, 0, kept)
  if (defs === undefined) return root
  return { ...(root as SchemaObject), $defs: Object.fromEntries(Object.entries(defs).map(([name, def]) => [name, enforceable(def, names, `${param}.$defs.${name}`, 1, kept)])) }
}

/**
 * What `enforceable` has seen of one schema: the distinct patterns it tried, and whether each is ECMAScript; and the
 * subschemas it walked, each counting one toward MAX_SCHEMA_SUBSCHEMAS (convert weighs them as much or more), so that a
 * schema past the limit is refused before it is copied whole.
 */
interface Kept { readonly patterns: Map<string, boolean>, walked: number }

/**
 * `schema` less every keyword convert cannot compile, so that it compiles instead of being refused: a keyword no
 * grammar here writes or checks is dropped; `$ref`'s siblings are dropped, and a `$ref` convert cannot follow (`#`,
 * a nested `$defs`) is any value; an `anyOf` beside a typed schema that says more than its type is dropped (a bare
 * `type` goes into each alternative that names none); a schema without a type is any value (an `allOf` of one
 * schema, as pydantic gives a `$ref` a description, is that schema); a `const` or `enum` of objects is dropped; a
 * `pattern` that is no ECMAScript regular expression (another dialect's) and a `format` not held here are dropped;
 * `items: false` is a `maxItems`, and a list of `items` (draft 7's) is `prefixItems`. Whatever is left out is neither
 * in the grammar nor checked on the output: the value is held to what remains. Everything else is left for convert
 * to take or refuse as it does: a malformed keyword, a schema no value holds, and every limit against hostile
 * schemas (counts, patterns, subschemas, `{}` and `true` weighed as any value, nesting, alternatives). It walks only
 * what it keeps, one level of recursion per level of the schema, and refuses what nests past MAX_SCHEMA_DEPTH.
 */
function enforceable (schema: unknown, defNames: ReadonlySet<string>, path: string, depth: number, kept: Kept): unknown {
  if (depth > MAX_SCHEMA_DEPTH) throw invalid(path, `nests deeper than ${MAX_SCHEMA_DEPTH} levels`)
  if (++kept.walked > MAX_SCHEMA_SUBSCHEMAS) throw tooManySubschemas(path)
  if (!isSchemaObject(schema)) return schema // `true`, and what convert refuses
  const s = stripAnnotations(schema)
  const sub = (value: unknown, at: string): unknown => enforceable(value, defNames, `${path}.${at}`, depth + 1, kept)
  if (s.$ref !== undefined) {
    const match = typeof s.$ref === 'string' ? DEF_REF.exec(s.$ref) : null
    return match != null && defNames.has(match[1]) ? { $ref: s.$ref } : {}
  }
  if (s.const !== undefined && isPrimitive(s.const)) return pick(s, ['const', 'type'])
  if (Array.isArray(s.enum) && s.enum.every(isPrimitive)) return pick(s, ['enum', 'type'])
  const type = s.type ?? impliedType(s)
  const types: unknown[] = type === undefined ? [] : Array.isArray(type) ? type : [type]
  // An unknown type is the caller's mistake, not a keyword: convert refuses it, naming it
  if (!types.every((t) => typeof t === 'string' && TYPES.has(t))) return pick(s, ['type'])
  const typed = pick(s, ['type', ...types.flatMap((t) => [...(KEYWORDS_BY_TYPE[t as string] ?? [])])])
  const choice = s.anyOf !== undefined ? 'anyOf' : s.oneOf !== undefined ? 'oneOf' : null
  if (choice != null && (!Array.isArray(s[choice]) || (s[choice] as unknown[]).length === 0)) return pick(s, [choice]) // refused as malformed
  if (choice != null && Object.keys(typed).every((key) => key === 'type')) {
    const alternatives = (s[choice] as unknown[]).map((alternative) => isSchemaObject(alternative) && type !== undefined &&
      ['type', '$ref', 'const', 'enum'].every((key) => alternative[key] === undefined) ? { type, ...alternative } : alternative)
    return { [choice]: alternatives.map((alternative, i) => sub(alternative, `${choice}[${i}]`)) }
  }
  if (type === undefined) {
    if (!Array.isArray(s.allOf) || s.allOf.length !== 1) return {}
    kept.walked-- // the wrapper is not a subschema of its own: convert sees the one inside only
    return sub(s.allOf[0], 'allOf[0]')
  }
  const format = typed.format
  if (format !== undefined && !(typeof format === 'string' && (STRING_FORMATS.has(format) || Object.hasOwn(FORMATS_CHECKED_ON_OUTPUT, format)))) delete typed.format
  if (typed.pattern !== undefined && !isECMAScriptPattern(typed.pattern, kept)) delete typed.pattern
  if (isSchemaObject(typed.properties)) {
    if (kept.walked + Object.keys(typed.properties).length > MAX_SCHEMA_SUBSCHEMAS) throw tooManySubschemas(`${path}.properties`)
    typed.properties = Object.fromEntries(Object.entries(typed.properties).map(([name, value]) => [name, sub(value, `properties.${name}`)]))
  }
  if (isSchemaObject(typed.additionalProperties)) typed.additionalProperties = sub(typed.additionalProperties, 'additionalProperties')
  if (Array.isArray(typed.items) && typed.prefixItems === undefined) {
    typed.prefixItems = typed.items
    delete typed.items
  }
  if (Array.isArray(typed.prefixItems)) typed.prefixItems = typed.prefixItems.map((item, i) => sub(item, `prefixItems[${i}]`))
  if (typed.items === false) {
    // No items past the prefix: as many as it lists, at most
    const most = Array.isArray(typed.prefixItems) ? typed.prefixItems.length : 0
    if (typed.maxItems === undefined || (typeof typed.maxItems === 'number' && typed.maxItems > most)) typed.maxItems = most
    delete typed.items
  } else if (isSchemaObject(typed.items)) {
    typed.items = sub(typed.items, 'items')
  }
  return typed
}

/**
 * Whether a `pattern` is kept (`enforceable`): a string that compiles as an ECMAScript regular expression with
 * Unicode, or one convert refuses anyway (longer than MAX_PATTERN_CHARS). Past MAX_SCHEMA_PATTERNS distinct ones
 * (more than convert takes) the rest are kept untried, so a hostile schema's patterns are compiled that often at most.
 */
function isECMAScriptPattern (pattern: unknown, kept: Kept): boolean {
  if (typeof pattern !== 'string') return false
  const known = kept.patterns.get(pattern)
  if (known !== undefined) return known
  if (pattern.length > MAX_PATTERN_CHARS || kept.patterns.size >= MAX_SCHEMA_PATTERNS) return true
  let compiles = true
  try {
    void new RegExp(pattern, 'u')
  } catch {
    compiles = false
  }
  kept.patterns.set(pattern, compiles)
  return compiles
}

function convert (schema: unknown, path: string, depth: number, ctx: Conversion): GbnfJsonSchema {
  if (depth > MAX_SCHEMA_DEPTH) throw invalid(path, `nests deeper than ${MAX_SCHEMA_DEPTH} levels`)
  grow(ctx, 1, path)
  if (depth > (ctx.deepest.get(ctx.part) ?? 0)) ctx.deepest.set(ctx.part, depth)
  if (schema === true) return anyValue(ctx, path)
  if (!isSchemaObject(schema)) throw invalid(path, 'must be a JSON Schema object')
  const s = stripAnnotations(schema)
  if (Object.keys(s).length === 0) return anyValue(ctx, path)

  if (s.$ref !== undefined) {
    only(s, path, ['$ref'])
    const match = typeof s.$ref === 'string' ? DEF_REF.exec(s.$ref) : null
    if (match == null || !ctx.defNames.has(match[1])) throw invalid(`${path}.$ref`, 'must point at an entry of the root $defs')
    const refs = ctx.refs.get(ctx.part) ?? []
    ctx.refs.set(ctx.part, [...refs, { depth, to: match[1] }])
    return { $ref: `#/$defs/${match[1]}` } as GbnfJsonSchema
  }
  if (s.const !== undefined) {
    only(s, path, ['const', 'type'])
    if (!isPrimitive(s.const)) throw invalid(`${path}.const`, 'must be a string, number, boolean or null')
    if (!ofType(s.type, s.const)) throw invalid(`${path}.const`, 'is not of the schema\'s type, so no value can hold')
    return { const: s.const }
  }
  if (s.enum !== undefined) {
    only(s, path, ['enum', 'type'])
    if (!Array.isArray(s.enum) || s.enum.length === 0 || !s.enum.every(isPrimitive)) {
      throw invalid(`${path}.enum`, 'must be a non-empty array of strings, numbers, booleans or nulls')
    }
    if (s.enum.length > MAX_ALTERNATIVES) throw invalid(`${path}.enum`, `lists ${s.enum.length} values; constrained output takes at most ${MAX_ALTERNATIVES}`)
    // The grammar lists the values: those not of the schema's type are not offered
    const values = s.enum.filter((value) => ofType(s.type, value))
    if (values.length === 0) throw invalid(`${path}.enum`, 'lists no value of the schema\'s type, so no value can hold')
    // Listed values cannot be checked on the output instead
    if (!spend(ctx, values.length * ENUM_VALUE_REPETITIONS)) {
      throw invalid(`${path}.enum`, `brings the schema's listed values and counts to more than ${MAX_SCHEMA_REPETITIONS} in all, more than constrained output can compile`)
    }
    return { enum: values }
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
    const counts = grammarCounts(s, path, ['minLength', 'maxLength'], ctx, 'string')
    if (s.pattern !== undefined) {
      compilePattern(s.pattern, `${path}.pattern`)
      ctx.patterns.add(s.pattern as string)
      if (ctx.patterns.size > MAX_SCHEMA_PATTERNS) throw invalid(`${path}.pattern`, `brings the schema to more than ${MAX_SCHEMA_PATTERNS} distinct patterns, more than an answer can be checked against`)
    }
    // `format`: the grammar writes out the ones it knows, the output is checked for a few common others, and any other
    // is refused: a format accepted and not held would be a promise broken
    if (s.format !== undefined && !(typeof s.format === 'string' && (STRING_FORMATS.has(s.format) || Object.hasOwn(FORMATS_CHECKED_ON_OUTPUT, s.format)))) {
      throw invalid(`${path}.format`, `is not one of the formats held here (${[...STRING_FORMATS, ...Object.keys(FORMATS_CHECKED_ON_OUTPUT)].join(', ')})`)
    }
    if (typeof s.format === 'string' && STRING_FORMATS.has(s.format)) {
      // node-llama-cpp writes a date's own shape and drops lengths beside it: those are checked on the output
      if (s.minLength !== undefined || s.maxLength !== undefined) ctx.countsOnOutput = true
      return { type: 'string', format: s.format } as GbnfJsonSchema
    }
    return { type: 'string', ...counts } as GbnfJsonSchema
  }
  return { type: type as 'boolean' }
}

/** Whether `value` is of `type` (a schema's `type`: a name, a list of names, or none for any). */
function ofType (type: unknown, value: unknown): boolean {
  return type === undefined || admits(Array.isArray(type) ? type as string[] : [String(type)], value)
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
  const counts = grammarCounts(s, path, ['minProperties', 'maxProperties'], ctx, 'collection')
  if (s.properties !== undefined && !isSchemaObject(s.properties)) throw invalid(`${path}.properties`, 'must be an object of schemas')
  if (s.required !== undefined && !(Array.isArray(s.required) && s.required.every((r) => typeof r === 'string'))) {
    throw invalid(`${path}.required`, 'must be an array of property names')
  }
  // fromEntries: a property named `__proto__` is a property like any other, never the object's prototype
  // Each property costs a subschema at least: too many are refused before each is copied
  if (s.properties !== undefined && ctx.subschemas + Object.keys(s.properties).length > MAX_SCHEMA_SUBSCHEMAS) throw tooManySubschemas(`${path}.properties`)
  const properties = Object.fromEntries(Object.entries(s.properties ?? {}).map(([name, sub]) => [name, convert(sub, `${path}.properties.${name}`, depth + 1, ctx)]))
  const extra = s.additionalProperties
  // JSON Schema allows any extra property by default; node-llama-cpp allows none. With no properties named,
  // "none" would force `{}`, so we keep the schema's meaning; with properties named, forbidding extras still
  // yields only valid objects.
  if (extra === true || (extra === undefined && s.properties === undefined)) grow(ctx, FREE_OBJECT_WEIGHT, path)
  const unnamed = Array.isArray(s.required) ? (s.required as string[]).find((name) => !Object.hasOwn(properties, name)) : undefined
  if (unnamed !== undefined && extra === false) throw invalid(`${path}.required`, `requires ${unnamed}, a property the schema neither names nor allows`)
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
  const counts = grammarCounts(s, path, ['minItems', 'maxItems'], ctx, 'collection')
  if (s.prefixItems !== undefined && !Array.isArray(s.prefixItems)) throw invalid(`${path}.prefixItems`, 'must be an array of schemas')
  if (s.items === undefined) grow(ctx, FREE_ARRAY_WEIGHT, path)
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
 * A least and a most count (`keys`) checked, and what of them the grammar writes: each up to GRAMMAR_WRITTEN_COUNT
 * for its kind, and, past the grammar's budget, neither. What the grammar leaves out is checked on the output.
 * Identical string bounds are one rule, counted once.
 */
function grammarCounts (s: SchemaObject, path: string, keys: readonly [string, string], ctx: Conversion, kind: 'string' | 'collection'): SchemaObject {
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
  const limit = GRAMMAR_WRITTEN_COUNT[kind]
  const writesLeast = least !== undefined && least <= limit
  const writesMost = most !== undefined && most <= limit
  if ((least !== undefined && !writesLeast) || (most !== undefined && !writesMost)) ctx.countsOnOutput = true
  const written = pick(s, keys.filter((_, i) => i === 0 ? writesLeast : writesMost))
  const cost = writesMost ? most : writesLeast ? Math.ceil(least / 8) : 0
  const bounds = `${writesLeast ? least : ''}-${writesMost ? most : ''}`
  const shared = kind === 'string'
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
 * Refuses a schema nesting deeper than MAX_REF_NESTING through its $refs: a part's levels are its own deepest, or a
 * $ref's level plus the levels of what it leads to, whichever is more. A definition met again while it is being
 * counted (recursion) adds one level; each is counted once, from wherever it is first met. Every step down a $ref
 * adds a level, so this recursion is bounded by MAX_REF_NESTING too.
 */
function checkRefNesting (ctx: Conversion, param: string): void {
  const known = new Map<SchemaPart, number>()
  const open = new Set<SchemaPart>()
  const levels = (part: SchemaPart, base: number): number => {
    const memo = known.get(part)
    if (memo !== undefined) return memo
    if (open.has(part)) return 1
    open.add(part)
    let deepest = ctx.deepest.get(part) ?? 0
    for (const ref of ctx.refs.get(part) ?? []) {
      if (base + deepest > MAX_REF_NESTING) break
      deepest = Math.max(deepest, ref.depth + levels(ref.to, base + ref.depth))
    }
    if (base + deepest > MAX_REF_NESTING) throw invalid(param, `nests deeper than ${MAX_REF_NESTING} levels through its $refs, more than constrained output can compile`)
    open.delete(part)
    known.set(part, deepest)
    return deepest
  }
  levels(null, 0)
  for (const name of ctx.defNames) levels(name, 0)
}

/**
 * Refuses a converted schema offering more than MAX_ALTERNATIVES alternatives at one place: at every enum and anyOf
 * of the root and the definitions (each counted once, however many places lead to it).
 */
function checkAlternatives (root: GbnfJsonSchema, defs: Record<string, GbnfJsonSchema>, param: string): void {
  const counted = new Map<string, number>()
  const known = new WeakMap<object, number>()
  const stack: unknown[] = [root, ...Object.values(defs)]
  for (let next = stack.pop(); next !== undefined; next = stack.pop()) {
    if (typeof next !== 'object' || next === null) continue
    const s = next as SchemaObject
    if (Array.isArray(s.oneOf) || Array.isArray(s.enum)) {
      const count = alternatives(s as GbnfJsonSchema, defs, counted, known)
      if (count > MAX_ALTERNATIVES) {
        throw invalid(param, `offers ${count} alternatives at one place (enum values, anyOf branches); constrained output takes at most ${MAX_ALTERNATIVES} there`)
      }
    }
    for (const value of Object.values(s)) if (typeof value === 'object' && value !== null) stack.push(value)
  }
}

/**
 * The alternatives a converted schema offers where its value starts: an enum's distinct values, the sum over a
 * oneOf's branches (the same $ref twice is two: llama.cpp sets each up apart, so nested anyOfs of $refs multiply),
 * what a $ref leads to (a $ref back to a definition still being counted adds nothing), and one for anything else (a
 * type list: one per type).
 */
function alternatives (schema: GbnfJsonSchema, defs: Record<string, GbnfJsonSchema>, counted: Map<string, number>, known: WeakMap<object, number>): number {
  const s = schema as SchemaObject
  const memo = known.get(s)
  if (memo !== undefined) return memo
  let count = 1
  if (Array.isArray(s.enum)) {
    count = new Set(s.enum).size
  } else if (Array.isArray(s.oneOf)) {
    count = 0
    for (const branch of s.oneOf as SchemaObject[]) count += alternatives(branch as GbnfJsonSchema, defs, counted, known)
  } else if (typeof s.$ref === 'string') {
    const name = s.$ref.slice('#/$defs/'.length)
    const done = counted.get(name)
    if (done != null) return done
    counted.set(name, 0)
    count = Object.hasOwn(defs, name) ? alternatives(defs[name], defs, counted, known) : 1
    counted.set(name, count)
  } else if (Array.isArray(s.type)) {
    count = s.type.length
  }
  known.set(s, count)
  return count
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

/**
 * Deepest the check follows an answer and its schema together ($refs and anyOfs count as levels): a recursive
 * schema's answer may nest as deep as the model wrote it. Past this the answer cannot be checked, and fails so.
 */
const MAX_CHECK_DEPTH = 1024

/** The check of an answer or a call's arguments against the keywords their grammar did not enforce. */
class OutputChecks {
  readonly #schema: SchemaObject
  readonly #defs: SchemaObject | undefined
  /** Whether counts are checked too (some were left out of the grammar). */
  readonly #counts: boolean
  /** Whether any definition holds a checked keyword: what every $ref is taken to hold. */
  readonly #refsHold: boolean
  /** Per schema object: whether it holds a checked keyword anywhere under it. */
  #holds = new WeakMap<object, boolean>()
  /** This schema's patterns, compiled. */
  readonly #patterns = new Map<string, RegExp>()

  constructor (schema: SchemaObject, defs: unknown, counts: boolean) {
    this.#schema = schema
    this.#defs = isSchemaObject(defs) ? defs : undefined
    this.#counts = counts
    this.#refsHold = Object.values(this.#defs ?? {}).some((def) => this.#holdsCheck(def, false))
    this.#holds = new WeakMap() // what was learnt without following $refs is not what a $ref holds
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

  /** Whether `schema` holds a checked keyword anywhere under it (a $ref: what `refs` says). Memoized. */
  #holdsCheck (schema: unknown, refs = this.#refsHold): boolean {
    if (!isSchemaObject(schema)) return false
    const known = this.#holds.get(schema)
    if (known !== undefined) return known
    this.#holds.set(schema, false) // a schema nests no cycle but through $refs; this only guards
    const holds = (typeof schema.$ref === 'string' && refs) ||
      Object.values(CHECKED_ON_OUTPUT).some((keys) => keys.some((key) => schema[key] !== undefined)) ||
      (typeof schema.format === 'string' && Object.hasOwn(FORMATS_CHECKED_ON_OUTPUT, schema.format)) ||
      (this.#counts && COUNT_KEYWORDS.some((key) => schema[key] !== undefined)) ||
      requiresUnnamed(schema) ||
      [
        ...(isSchemaObject(schema.properties) ? Object.values(schema.properties) : []),
        schema.additionalProperties, schema.items,
        ...[schema.prefixItems, schema.anyOf, schema.oneOf].flatMap((list) => Array.isArray(list) ? list as unknown[] : [])
      ].some((sub) => this.#holdsCheck(sub, refs))
    this.#holds.set(schema, holds)
    return holds
  }

  /**
   * The first break under `schema`. `chosen`: the grammar made `value` through this schema, so a schema holding no
   * checked keyword has nothing to add. Otherwise (within an anyOf whose alternatives could each have made it) every
   * keyword decides, the grammar's own too (types, const, enum, counts, required and unnamed properties), so that
   * the value is checked against the alternative it went through.
   */
  #violation (schema: unknown, value: unknown, at: string, walk: Walk, depth: number, chosen: boolean): string | null {
    if (!isSchemaObject(schema)) return null
    if (chosen && !this.#holdsCheck(schema)) return null
    if (depth > MAX_CHECK_DEPTH) throw new CheckTooLong(`it nests deeper than ${MAX_CHECK_DEPTH} levels`)
    if (++walk.steps > MAX_OUTPUT_CHECK_STEPS) throw new CheckTooLong(`it takes more than ${MAX_OUTPUT_CHECK_STEPS} steps`)
    if (typeof schema.$ref === 'string') {
      const name = /^#\/(?:\$defs|definitions)\/([^/]+)$/.exec(schema.$ref)?.[1]
      return name == null || this.#defs == null || !Object.hasOwn(this.#defs, name) ? null : this.#violation(this.#defs[name], value, at, walk, depth + 1, chosen)
    }
    const alternatives = schema.anyOf ?? schema.oneOf
    if (Array.isArray(alternatives)) return this.#alternatives(alternatives, value, at, walk, depth, chosen)
    const strict = !chosen
    if (strict) {
      if (schema.const !== undefined && value !== schema.const) return `${at} is not ${JSON.stringify(schema.const)}`
      if (Array.isArray(schema.enum) && !schema.enum.includes(value)) return `${at} is not one of the listed values`
    }
    // Within anyOf, an alternative of another type is not the one the value went through
    const types = typeOf(schema)
    if (types != null && !admits(types, value)) return `${at} is not of type ${types.join(' or ')}`
    const counts = strict || this.#counts
    if (typeof value === 'number') {
      const { minimum, maximum, exclusiveMinimum, exclusiveMaximum } = schema
      if (typeof minimum === 'number' && value < minimum) return `${at} is ${value}, below the minimum ${minimum}`
      if (typeof maximum === 'number' && value > maximum) return `${at} is ${value}, above the maximum ${maximum}`
      if (typeof exclusiveMinimum === 'number' && value <= exclusiveMinimum) return `${at} is ${value}, not above ${exclusiveMinimum}`
      if (typeof exclusiveMaximum === 'number' && value >= exclusiveMaximum) return `${at} is ${value}, not below ${exclusiveMaximum}`
      return null
    }
    if (typeof value === 'string') {
      const counted = counts ? countViolation(schema, 'minLength', 'maxLength', codePoints(value), at, 'characters') : null
      if (counted != null) return counted
      if (typeof schema.pattern === 'string' && !this.#matches(schema.pattern, value, walk)) return `${at} does not match the pattern ${schema.pattern}`
      const format = typeof schema.format === 'string' && Object.hasOwn(FORMATS_CHECKED_ON_OUTPUT, schema.format) ? FORMATS_CHECKED_ON_OUTPUT[schema.format] : null
      if (format != null && !format.test(value)) return `${at} is not a valid ${String(schema.format)}`
      return null
    }
    if (Array.isArray(value)) {
      const counted = counts ? countViolation(schema, 'minItems', 'maxItems', value.length, at, 'items') : null
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
      const counted = counts ? countViolation(schema, 'minProperties', 'maxProperties', Object.keys(value).length, at, 'properties') : null
      if (counted != null) return counted
      const properties = isSchemaObject(schema.properties) ? schema.properties : {}
      // The grammar writes every named property; one required and not named it cannot
      const missing = (strict || requiresUnnamed(schema)) && Array.isArray(schema.required) ? schema.required.find((name) => typeof name === 'string' && !Object.hasOwn(value, name)) : undefined
      if (missing !== undefined) return `${at} has no property ${String(missing)}`
      if (strict) {
        const unnamed = allowsUnnamed(schema) ? undefined : Object.keys(value).find((key) => !Object.hasOwn(properties, key))
        if (unnamed !== undefined) return `${at} has a property ${unnamed} the schema does not name`
      }
      for (const [key, item] of Object.entries(value)) {
        const found = this.#violation(Object.hasOwn(properties, key) ? properties[key] : schema.additionalProperties, item, `${at}.${key}`, walk, depth + 1, chosen)
        if (found != null) return found
      }
    }
    return null
  }

  /**
   * An anyOf: the value breaks it only if it breaks every alternative. Where only one alternative's type admits it,
   * that is the one the grammar made it through (chosen, if the anyOf was). An alternative that holds only if matches
   * still asked for do does not end the search: the other alternatives' matches are asked in the same walk.
   */
  #alternatives (alternatives: unknown[], value: unknown, at: string, walk: Walk, depth: number, chosen: boolean): string | null {
    const open = alternatives.filter((alternative) => {
      const types = isSchemaObject(alternative) ? typeOf(alternative) : null
      return types == null || admits(types, value)
    })
    const through = chosen && open.length === 1
    let first: string | null = null
    let heldIfMatched = false
    for (const alternative of through ? open : alternatives) {
      const asked = walk.asked.length
      const found = this.#violation(alternative, value, at, walk, depth + 1, through)
      if (found == null && walk.asked.length === asked) return null
      if (found == null) heldIfMatched = true
      first ??= found
    }
    return heldIfMatched ? null : first
  }

  /** Whether `text` matches `pattern`: known from an earlier walk, asked for (taken to match for now), or run at once. */
  #matches (pattern: string, text: string, walk: Walk): boolean {
    let byText = walk.matched.get(pattern)
    if (byText == null) walk.matched.set(pattern, byText = new Map())
    const known = byText.get(text)
    if (known != null) return known
    let regex = this.#patterns.get(pattern)
    if (regex == null) this.#patterns.set(pattern, regex = compilePattern(pattern, 'pattern'))
    if (!walk.direct) {
      if (known === undefined) walk.asked.push({ pattern, regex, text })
      byText.set(text, null)
      return true
    }
    walk.asked = [{ pattern, regex, text }]
    matchAsked(walk)
    return byText.get(text) === true
  }
}

/**
 * Whether an object schema requires a property it does not name, and allows properties it does not name: what its
 * grammar cannot hold (it writes every named property). With named properties and nothing said of others, its
 * grammar allows none, and such a `required` is left unheld, as JSON Schema's lenient readers do.
 */
function requiresUnnamed (schema: SchemaObject): boolean {
  return allowsUnnamed(schema) && Array.isArray(schema.required) &&
    schema.required.some((name) => typeof name === 'string' && !(isSchemaObject(schema.properties) && Object.hasOwn(schema.properties, name)))
}

/** Whether an object schema's grammar allows properties it does not name: with some named and nothing said, none. */
function allowsUnnamed (schema: SchemaObject): boolean {
  const extra = schema.additionalProperties
  return extra === undefined ? schema.properties === undefined : extra !== false
}

/** A schema's types: its `type`, or the one its keywords imply (`properties`: an object); null for any. */
function typeOf (schema: SchemaObject): string[] | null {
  if (typeof schema.type === 'string') return [schema.type]
  if (Array.isArray(schema.type)) return schema.type as string[]
  const implied = impliedType(schema)
  return implied == null ? null : [implied]
}

/** Whether a value of `value`'s JSON type is one of `types` (an integer is a number too). */
function admits (types: readonly string[], value: unknown): boolean {
  const type = jsonType(value)
  return types.some((t) => t === type || (t === 'number' && type === 'integer'))
}

/** One answer's check as it goes: its steps in this walk, and its pattern matches, known or asked for. */
interface Walk {
  steps: number
  /** Per pattern, per string: whether it matches, or null while asked for. */
  matched: Map<string, Map<string, boolean | null>>
  /** Matches this walk asked for, to run together after it. */
  asked: Array<{ pattern: string, regex: RegExp, text: string }>
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

/** One context for every pattern check: the matches run in it so that its timeout can stop them. */
const patternSandbox = createContext({ asked: [] as Walk['asked'] })
const patternTests = new Script('asked.map((one) => one.regex.test(one.text))')

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
  asked.forEach(({ pattern, text }, i) => walk.matched.get(pattern)?.set(text, results[i] === true))
}

function jsonType (value: unknown): string {
  if (value === null) return 'null'
  if (Array.isArray(value)) return 'array'
  if (typeof value === 'number') return Number.isInteger(value) ? 'integer' : 'number'
  return typeof value
}

/**
 * Most distinct patterns one schema may hold. Each is compiled when an answer is first checked against it, within the
 * answer's MAX_PATTERN_CHECK_MS (a long one takes a quarter of a millisecond): with more, a valid answer could fail
 * to be checked in time.
 */
export const MAX_SCHEMA_PATTERNS = 256
const PATTERNS_KEPT = MAX_SCHEMA_PATTERNS
/** Longest `pattern` taken. */
const MAX_PATTERN_CHARS = 1024
const patterns = new Map<string, RegExp>()

/** A schema's `pattern` as a JavaScript RegExp (ECMA-262, as JSON Schema defines it, with Unicode); refused when invalid. */
function compilePattern (pattern: unknown, param: string): RegExp {
  if (typeof pattern !== 'string' || pattern.length > MAX_PATTERN_CHARS) throw invalid(param, `must be a regular expression of at most ${MAX_PATTERN_CHARS} characters`)
  let compiled = patterns.get(pattern)
  if (compiled == null) {
    // A repeated group holding a repetition can take exponential time on a long answer: refused up front (every other
    // pattern's match runs under MAX_PATTERN_CHECK_MS)
    if (repeatsRepetition(pattern)) throw invalid(param, 'has a repeated group that itself repeats, which is not accepted (it can take exponential time)')
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

/** One atom of a group, as `repeatsRepetition` reads it: a literal character, or anything else; and whether it repeats. */
interface Atom { literal: boolean, repeated: boolean }
interface Group { holds: boolean, first: Atom | null, last: Atom | null, alternatives: boolean }

/**
 * Whether `pattern` repeats without bound (`*`, `+`, `{n,}`) a group that holds a repetition and is not delimited by a
 * literal character at its start or its end: `(a+)+`, `(\w*\d)*`, `((a|b)+)*`, the shapes that backtrack
 * exponentially. A group with a literal separator (`(-[a-z0-9]+)*`, `([a-z0-9]+\.)+`), one whose counts are exact
 * (`([0-9a-f]{4})*`), or one repeated a bounded number of times (`(\d{1,3}\.){3}`) is taken; every match runs under
 * MAX_PATTERN_CHECK_MS all the same. One pass: escapes
 * (`\p{…}`, `\u{…}` included) and character classes are read as single atoms.
 */
function repeatsRepetition (pattern: string): boolean {
  const groups: Group[] = [{ holds: false, first: null, last: null, alternatives: false }]
  const atom = (literal: boolean): void => {
    const group = groups[groups.length - 1]
    group.last = { literal, repeated: false }
    group.first ??= group.last
  }
  for (let i = 0; i < pattern.length; i++) {
    const c = pattern[i]
    const group = groups[groups.length - 1]
    if (c === '\\') {
      const escaped = pattern[++i] ?? ''
      if ('pPu'.includes(escaped) && pattern[i + 1] === '{') i = Math.max(i, pattern.indexOf('}', i))
      atom(!/[dDwWsSbBpPk1-9]/.test(escaped))
    } else if (c === '[') {
      for (i++; i < pattern.length && pattern[i] !== ']'; i++) if (pattern[i] === '\\') i++
      atom(false)
    } else if (c === '(') {
      groups.push({ holds: false, first: null, last: null, alternatives: false })
      // The `?` of (?: (?= (?! (?<= (?<! (?<name> is no repetition, nor is what follows it an atom
      if (pattern[i + 1] === '?') i = pattern[i + 2] === '<' && !'=!'.includes(pattern[i + 3] ?? '') ? Math.max(i, pattern.indexOf('>', i)) : i + (pattern[i + 2] === '<' ? 3 : 2)
    } else if (c === ')' && groups.length > 1) {
      const closed = groups.pop() as Group
      const delimited = !closed.alternatives && [closed.first, closed.last].some((end) => end != null && end.literal && !end.repeated)
      const unbounded = pattern[i + 1] === '*' || pattern[i + 1] === '+' || /^\{\d+,\}/.test(pattern.slice(i + 1, i + 16))
      if (closed.holds && !delimited && unbounded) return true
      const parent = groups[groups.length - 1]
      atom(false)
      if (closed.holds) parent.holds = true
    } else if (c === '|') {
      group.alternatives = true
    } else if ('*+?{'.includes(c)) {
      const count = c === '{' ? /^\{(\d+)(,(\d*))?\}/.exec(pattern.slice(i, i + 24)) : null
      if (c === '{') i = Math.max(i, pattern.indexOf('}', i))
      if (pattern[i + 1] === '?') i++ // lazy
      // An exact count (`{4}`) is a longer atom, not a choice of how many
      if (count != null && (count[2] === undefined || count[3] === count[1])) continue
      if (group.last != null) group.last.repeated = true
      group.holds = true
    } else if (c !== '^' && c !== '$') {
      atom(c !== '.')
    }
  }
  return false
}
