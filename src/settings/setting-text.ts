// Settings as a person types them (`meshnode config set <key> <value>`): one rule for booleans, and what each key
// accepts derived from SettingsPatch, so the help and the refusals cannot drift from what the node takes.
import { z } from 'zod'
import { InvalidInputError } from '../errors.ts'
import { SettingsPatch, type SettingKey, type Settings } from './settings.ts'

/** The words a boolean setting takes, in any case; every other word is refused naming the setting. */
export const TRUE_WORDS = ['true', 'yes', 'on', '1'] as const
export const FALSE_WORDS = ['false', 'no', 'off', '0'] as const

/** What a setting accepts, in words, and what it does. */
export interface SettingDescription {
  key: SettingKey
  /** e.g. `true or false (also yes/no, on/off, 1/0)`, `a number from 0 to 1`, `one of llama.cpp, peers`. */
  accepts: string
  description: string
}

interface PropertySchema {
  type?: string
  enum?: string[]
  minimum?: number
  maximum?: number
  exclusiveMinimum?: number
  maxLength?: number
  description?: string
}

/** true or false for one of the boolean words, null for any other text. */
export function parseBooleanWord (text: string): boolean | null {
  const word = text.trim().toLowerCase()
  if ((TRUE_WORDS as readonly string[]).includes(word)) return true
  if ((FALSE_WORDS as readonly string[]).includes(word)) return false
  return null
}

/** Every setting with what it accepts, in the order of SettingsPatch. */
export function describeSettings (): SettingDescription[] {
  return Object.entries(properties()).map(([key, schema]) => ({ key: key as SettingKey, accepts: accepts(schema), description: schema.description ?? '' }))
}

/**
 * The value of `key` that `text` means: a boolean by the words above, a number, one of a setting's choices, or text.
 * Throws InvalidInputError with one sentence naming the key (and what it accepts) for an unknown key or a value
 * the node would refuse.
 */
export function settingFromText (key: string, text: string): Settings[SettingKey] {
  const schemas = properties()
  const schema = schemas[key]
  if (schema == null) throw new InvalidInputError(`Unknown setting ${key}: the settings are ${Object.keys(schemas).join(', ')}`, key)
  const refuse = (why = `must be ${accepts(schema)}`): never => { throw new InvalidInputError(`${key} ${why}, not "${text}"`, key) }
  let value: Settings[SettingKey] = text
  if (schema.type === 'boolean') {
    value = parseBooleanWord(text) ?? refuse()
  } else if (schema.type === 'number') {
    value = Number(text)
    if (text.trim() === '' || !Number.isFinite(value)) refuse()
  }
  const parsed = SettingsPatch.safeParse({ [key]: value })
  if (!parsed.success) {
    // A rule of its own (a URL, a currency code) says what it wants; ranges and choices say it in accepts()
    const custom = parsed.error.issues.find((issue) => issue.code === 'custom')
    refuse(custom == null ? undefined : custom.message)
  }
  return value
}

function properties (): Record<string, PropertySchema> {
  return (z.toJSONSchema(SettingsPatch, { io: 'input' }) as { properties: Record<string, PropertySchema> }).properties
}

function accepts (schema: PropertySchema): string {
  if (schema.type === 'boolean') {
    return `true or false (also ${TRUE_WORDS.slice(1).map((word, i) => `${word}/${FALSE_WORDS[i + 1]}`).join(', ')})`
  }
  if (schema.enum != null) return `one of ${schema.enum.join(', ')}`
  if (schema.type === 'number') {
    if (schema.exclusiveMinimum != null) return `a number above ${schema.exclusiveMinimum}${schema.maximum == null ? '' : `, at most ${schema.maximum}`}`
    if (schema.minimum != null) return schema.maximum == null ? `a number of at least ${schema.minimum}` : `a number from ${schema.minimum} to ${schema.maximum}`
    return schema.maximum == null ? 'a number' : `a number of at most ${schema.maximum}`
  }
  return schema.maxLength == null ? 'text' : `text of at most ${schema.maxLength} characters`
}
