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
  // Two stacks side by side, and no array of children per node: a walk of a few hundred thousand nodes allocates
  // nothing per node.
  const values: object[] = []
  const depths: number[] = []
  if (typeof value === 'object' && value !== null) { values.push(value); depths.push(1) }
  while (values.length > 0) {
    const next = values.pop() as object
    const depth = depths.pop() as number
    if (depth > max) return true
    if (Array.isArray(next)) {
      for (let i = 0; i < next.length; i++) {
        const child: unknown = next[i]
        if (typeof child === 'object' && child !== null) { values.push(child); depths.push(depth + 1) }
      }
    } else {
      for (const key in next) {
        const child: unknown = (next as Record<string, unknown>)[key]
        if (typeof child === 'object' && child !== null) { values.push(child); depths.push(depth + 1) }
      }
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
  // Every object or array met is numbered: its key and its parent's number are kept, so that a path is built only for
  // the one problem found, not for every node (a few hundred thousand nodes would allocate as many paths).
  const keys: PropertyKey[] = ['']
  const parents: number[] = [-1]
  const pathOf = (at: number, key?: PropertyKey): PropertyKey[] => {
    const path: PropertyKey[] = key === undefined ? [] : [key]
    for (let i = at; i > 0; i = parents[i]) path.push(keys[i])
    return path.reverse()
  }
  const stack: number[] = [0]
  const nodes: object[] = [value as object]
  const depths: number[] = [1]
  /** Numbers and stacks `item`, a member of node `at`, when it is an object or array; else why it is no JSON, or null. */
  const visit = (at: number, key: PropertyKey, item: unknown): { path: PropertyKey[], message: string } | null => {
    const problem = scalarProblem(item)
    if (problem === undefined) {
      stack.push(nodes.length)
      nodes.push(item as object)
      depths.push(depths[at] + 1)
      keys.push(key)
      parents.push(at)
      return null
    }
    return problem == null ? null : { path: pathOf(at, key), message: problem }
  }
  while (stack.length > 0) {
    const at = stack.pop() as number
    const node = nodes[at]
    if (depths[at] > max) return { path: [], message: nestedTooDeep(max) }
    if (Array.isArray(node)) {
      for (let i = 0; i < node.length; i++) {
        const problem = visit(at, i, node[i])
        if (problem != null) return problem
      }
      continue
    }
    const prototype: unknown = Object.getPrototypeOf(node)
    if (prototype !== Object.prototype && prototype !== null) return { path: pathOf(at), message: 'expected a plain object' }
    // for-in walks own keys only here: a plain object's prototype (Object.prototype, or none) has no enumerable ones.
    for (const key in node) {
      const problem = visit(at, key, (node as Record<string, unknown>)[key])
      if (problem != null) return problem
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

/**
 * The length of `value`'s JSON text (as JSON.stringify writes it, less the escapes in strings) and how many values it
 * holds, itself included; null as soon as either passes its limit, so a value built to be costly to walk is walked
 * only that far. Iterative: any depth is safe.
 */
export function jsonSize (value: unknown, limits: { maxChars: number, maxValues: number }): { chars: number, values: number } | null {
  const stack: unknown[] = [value]
  let chars = 0
  let values = 0
  while (stack.length > 0) {
    const next = stack.pop()
    values++
    if (typeof next === 'string') {
      chars += next.length + 2
    } else if (typeof next === 'number' || typeof next === 'boolean') {
      chars += String(next).length
    } else if (next === null) {
      chars += 4
    } else if (Array.isArray(next)) {
      if (values + stack.length + next.length > limits.maxValues) return null
      chars += 2 + Math.max(next.length - 1, 0)
      for (const item of next as unknown[]) stack.push(item)
    } else if (typeof next === 'object') {
      const keys = Object.keys(next)
      if (values + stack.length + keys.length > limits.maxValues) return null
      chars += 2 + Math.max(keys.length - 1, 0)
      for (const key of keys) {
        chars += key.length + 3
        stack.push((next as Record<string, unknown>)[key])
      }
    }
    if (chars > limits.maxChars) return null
  }
  return { chars, values }
}
