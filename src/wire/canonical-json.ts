import { MAX_MESSAGE_DEPTH } from './json-depth.ts'

/**
 * The one byte-exact JSON form we sign: object keys sorted by UTF-16 code unit, no whitespace, numbers and strings as
 * `JSON.stringify` writes them (which is what RFC 8785 specifies for both). Only values that survive a JSON round trip
 * are accepted, so what the signer signs is exactly what the verifier rebuilds from the parsed message; anything else
 * (undefined in an array, NaN, a bigint, a Date, a class instance) throws instead of being silently changed.
 * An object property whose value is undefined is left out, as JSON.stringify does. A value nested deeper than a
 * message may be, wrapped once (`{body, domain}`), throws too: no peer accepts one, and writing it could overflow the stack.
 */
export function canonicalJson (value: unknown): string {
  return write(value, '$', 0)
}

function write (value: unknown, path: string, depth: number): string {
  if (value === null) return 'null'
  switch (typeof value) {
    case 'boolean':
      return value ? 'true' : 'false'
    case 'string':
      return JSON.stringify(value)
    case 'number':
      if (!Number.isFinite(value)) throw new TypeError(`canonicalJson: ${path} is not a finite number`)
      return JSON.stringify(value)
    case 'object':
      if (depth > MAX_MESSAGE_DEPTH) throw new TypeError(`canonicalJson: ${path} nests deeper than ${MAX_MESSAGE_DEPTH + 1} levels`)
      break
    default:
      throw new TypeError(`canonicalJson: ${path} is a ${typeof value}, which JSON cannot carry`)
  }
  if (Array.isArray(value)) {
    return '[' + value.map((item: unknown, i) => {
      if (item === undefined) throw new TypeError(`canonicalJson: ${path}[${i}] is undefined`)
      return write(item, `${path}[${i}]`, depth + 1)
    }).join(',') + ']'
  }
  const prototype: unknown = Object.getPrototypeOf(value)
  if (prototype !== Object.prototype && prototype !== null) {
    throw new TypeError(`canonicalJson: ${path} is not a plain object`)
  }
  const record = value as Record<string, unknown>
  const members: string[] = []
  for (const key of Object.keys(record).sort()) {
    if (record[key] === undefined) continue
    members.push(JSON.stringify(key) + ':' + write(record[key], `${path}.${key}`, depth + 1))
  }
  return '{' + members.join(',') + '}'
}
