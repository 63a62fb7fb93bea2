import { z } from 'zod'

// How deep JSON may nest where a client or a peer sends it. JSON.parse reads any depth, but JSON.stringify,
// structuredClone, zod's z.json(), canonical JSON and every other recursive walk overflow the stack a few thousand
// levels down (a RangeError, from wherever the value happens to be walked next), so a deeper value is refused where it
// enters, by the checks below: each walks with a stack of its own, never recursion, so it cannot overflow itself.

/**
 * Deepest nesting of arrays and objects in a field that takes any JSON value (a tool's parameter schema, a call's
 * arguments, a tool's result, an agent profile): the value itself is level 1. Real ones nest about ten levels.
 */
export const MAX_JSON_DEPTH = 64
/**
 * Deepest nesting of a whole peer message (a frame, a signed envelope's body): a protocol's own shape wraps the
 * free JSON values it carries (each within MAX_JSON_DEPTH) in a few levels of its own.
 */
export const MAX_MESSAGE_DEPTH = 2 * MAX_JSON_DEPTH

/** Why a value is refused, as a field's error message says it. */
export function nestedTooDeep (max: number = MAX_JSON_DEPTH): string {
  return `nested deeper than ${max} levels of arrays and objects`
}

/** Whether `value` nests arrays and objects deeper than `max` levels (a scalar is level 0). */
export function jsonDepthExceeds (value: unknown, max: number = MAX_JSON_DEPTH): boolean {
  const stack: Array<{ value: object, depth: number }> = []
  if (typeof value === 'object' && value !== null) stack.push({ value, depth: 1 })
  for (let next = stack.pop(); next != null; next = stack.pop()) {
    if (next.depth > max) return true
    for (const child of Array.isArray(next.value) ? next.value as unknown[] : Object.values(next.value)) {
      if (typeof child === 'object' && child !== null) stack.push({ value: child, depth: next.depth + 1 })
    }
  }
  return false
}

/**
 * Whether `text` is JSON nesting deeper than `max` levels. Text that is no JSON at all is not (a tool's result may be
 * plain text): it is parsed only when its brackets nest that deep.
 */
export function jsonTextDepthExceeds (text: string, max: number = MAX_JSON_DEPTH): boolean {
  if (text.length <= max) return false
  let depth = 0
  let deepest = 0
  let inString = false
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i)
    if (inString) {
      if (c === 0x5c) i++ // backslash: the next character is escaped
      else if (c === 0x22) inString = false
    } else if (c === 0x22) {
      inString = true
    } else if (c === 0x5b || c === 0x7b) {
      if (++depth > deepest) deepest = depth
    } else if (c === 0x5d || c === 0x7d) {
      depth--
    }
  }
  if (deepest <= max) return false
  try {
    JSON.parse(text)
    return true
  } catch {
    return false
  }
}

/**
 * The first thing that makes `value` no JSON value nested at most `max` levels: its path and why, or null. JSON as
 * zod's z.json() takes it: strings, finite numbers, booleans, null, arrays, and plain objects of those. Too deep a
 * value is the whole field's problem, so that issue's path is empty.
 */
export function jsonProblem (value: unknown, max: number = MAX_JSON_DEPTH): { path: PropertyKey[], message: string } | null {
  const scalar = scalarProblem(value)
  if (scalar !== undefined) return scalar == null ? null : { path: [], message: scalar }
  const stack: Array<{ value: object, depth: number, path: PropertyKey[] }> = [{ value: value as object, depth: 1, path: [] }]
  for (let next = stack.pop(); next != null; next = stack.pop()) {
    const { value, depth, path } = next
    if (depth > max) return { path: [], message: nestedTooDeep(max) }
    let entries: Array<[PropertyKey, unknown]>
    if (Array.isArray(value)) {
      entries = value.map((item: unknown, i) => [i, item])
    } else {
      const prototype: unknown = Object.getPrototypeOf(value)
      if (prototype !== Object.prototype && prototype !== null) return { path, message: 'expected a plain object' }
      entries = Object.entries(value)
    }
    for (const [key, item] of entries) {
      const problem = scalarProblem(item)
      if (problem === undefined) stack.push({ value: item as object, depth: depth + 1, path: [...path, key] })
      else if (problem != null) return { path: [...path, key], message: problem }
    }
  }
  return null
}

/** Null for a JSON scalar, undefined for an object or array (to be walked), else why it is no JSON. */
function scalarProblem (value: unknown): string | null | undefined {
  if (value === null || typeof value === 'string' || typeof value === 'boolean') return null
  if (typeof value === 'number') return Number.isFinite(value) ? null : 'expected a finite number'
  if (typeof value === 'object') return undefined
  return `expected JSON, got ${typeof value}`
}

function refineJson (value: unknown, ctx: z.RefinementCtx): void {
  const problem = jsonProblem(value)
  if (problem != null) ctx.addIssue({ code: 'custom', message: problem.message, path: problem.path })
}

/** Any JSON value nested at most MAX_JSON_DEPTH levels: z.json() for what a peer sends, bounded. */
export const JsonValue = z.custom<z.JSONType>().superRefine(refineJson)

/** A JSON object nested at most MAX_JSON_DEPTH levels, itself included: z.record(z.string(), z.json()), bounded. */
export const JsonObject = z.record(z.string(), z.custom<z.JSONType>()).superRefine(refineJson)

/** A string whose text, when it is JSON, nests at most MAX_JSON_DEPTH levels (a call's arguments, a tool's result). */
export const JsonText = z.string().refine((text) => !jsonTextDepthExceeds(text), `JSON ${nestedTooDeep()}`)
