import { EventEmitter } from 'node:events'
import { z } from 'zod'
import { InvalidInputError } from '../errors.ts'
import { inTransaction, type Database } from '../store/index.ts'

export const INFERENCE_BACKENDS = ['llama.cpp', 'peers'] as const
export const LANGUAGES = ['en', 'zh', 'es', 'pt-BR', 'fr', 'de', 'ja', 'ko', 'ru', 'it'] as const
const CURRENCIES = new Set(Intl.supportedValuesOf('currency'))

/** Relays `wan_relay_url` may name at once (one URL, or several separated by commas). */
export const MAX_RELAY_URLS = 8

/** The relays a `wan_relay_url` names: one URL or multiaddr, or several separated by commas; "" names none. */
export function relayUrls (value: string): string[] {
  return value.split(',').map(part => part.trim()).filter(part => part !== '')
}

const relayUrl = z.string().max(2048).refine((value) => value === '' || (
  value.split(',').every(part => isRelayAddress(part.trim())) && relayUrls(value).length <= MAX_RELAY_URLS
), {
  message: `must be empty, or a ws:// or wss:// URL or libp2p multiaddr, or up to ${MAX_RELAY_URLS} of them separated by commas`
})

/** Every setting with its type and range. Unknown keys are refused: typos must not pass. */
export const SettingsPatch = z.strictObject({
  cluster_enabled: z.boolean().describe('Find and serve peers on the LAN (mDNS)'),
  wan_enabled: z.boolean().describe('Find and serve peers across the internet through wan_relay_url'),
  wan_relay_url: relayUrl.describe('The meshnode relay: "", a ws:// or wss:// URL, or a libp2p multiaddr; several separated by commas'),
  max_storage_gb: z.number().positive().max(1_000_000).describe('Disk the models may take, in GB'),
  org_capacity_reservation: z.number().min(0).max(1).describe('Share of the slots kept for members of this node\'s PTNs, 0 to 1'),
  cluster_passcode: z.string().max(256).describe('Passcode LAN peers must prove; write-only: answers show "********" when set'),
  allow_network_access: z.boolean().describe('Listen on the network too; every request but /health then needs an API key'),
  electricity_cost: z.number().min(0).max(1_000_000).describe('Electricity price per kWh, in electricity_currency'),
  electricity_currency: z.string().refine((code) => CURRENCIES.has(code), { message: 'must be a 3-letter ISO 4217 currency code such as USD' })
    .describe('ISO 4217 code of electricity_cost'),
  electricity_margin: z.number().min(1).max(1000).describe('Multiplier on the electricity cost in the price (1.2 = 20 % margin)'),
  keep_awake: z.boolean().describe('Keep the machine from sleeping while the node runs'),
  auto_manage_models: z.boolean().describe('Download and load the models peers ask for that nobody serves'),
  inference_backend: z.enum(INFERENCE_BACKENDS).describe('llama.cpp: serve locally; peers: route every request to peers'),
  language: z.enum(LANGUAGES).describe('Language of the user interface'),
  // An addition: the JSON-RPC endpoint the on-chain wallet status asks.
  solana_rpc_url: z.string().max(2048).refine(isHttpUrl, { message: 'must be an http:// or https:// URL' }).describe('Solana JSON-RPC endpoint for the on-chain status')
}).partial()

export type Settings = Required<z.infer<typeof SettingsPatch>>
export type SettingsPatch = z.infer<typeof SettingsPatch>
export type SettingKey = keyof Settings

/**
 * Settings that are write-only: answers carry `SECRET_MASK` when one is set and `""` when not, never the
 * value. A patch that sends the mask back (a client that PATCHes what it read) leaves the secret as it is.
 */
export const SECRET_SETTINGS = ['cluster_passcode'] as const satisfies readonly SettingKey[]
export const SECRET_MASK = '********'

export const DEFAULT_SETTINGS: Readonly<Settings> = Object.freeze({
  cluster_enabled: false,
  wan_enabled: false,
  wan_relay_url: '',
  max_storage_gb: 50,
  org_capacity_reservation: 0,
  cluster_passcode: '',
  allow_network_access: false,
  electricity_cost: 0.12,
  electricity_currency: 'USD',
  electricity_margin: 1.2,
  keep_awake: false,
  auto_manage_models: false,
  inference_backend: 'llama.cpp',
  language: 'en',
  solana_rpc_url: 'https://api.mainnet-beta.solana.com'
})

function isRelayAddress (value: string): boolean {
  if (value.startsWith('/')) return /^\/(ip4|ip6|dns|dns4|dns6)\//.test(value)
  try {
    const url = new URL(value)
    return (url.protocol === 'ws:' || url.protocol === 'wss:') && url.hostname !== ''
  } catch (err) {
    if (err instanceof TypeError) return false // not a URL at all
    throw err
  }
}

function isHttpUrl (value: string): boolean {
  try {
    const url = new URL(value)
    return (url.protocol === 'http:' || url.protocol === 'https:') && url.hostname !== ''
  } catch (err) {
    if (err instanceof TypeError) return false // not a URL at all
    throw err
  }
}

export interface SettingsChange {
  previous: Settings
  current: Settings
  changed: SettingKey[]
}

/**
 * The node's settings, persisted in the database and cached in memory: every request reads them (auth checks
 * `allow_network_access`), so reads never touch SQLite. A patch is validated whole, then written in one transaction:
 * either every key changes or none does.
 */
export class SettingsStore {
  readonly #db: Database
  readonly #events = new EventEmitter<{ change: [SettingsChange] }>()
  #current: Settings

  constructor (deps: { db: Database }) {
    this.#db = deps.db
    this.#current = this.#read()
  }

  get (): Settings {
    return { ...this.#current }
  }

  /** The settings as answers show them: every secret masked. */
  redacted (): Settings {
    return redactSettings(this.#current)
  }

  /**
   * Applies `patch` atomically and returns the full settings (secrets included: callers that answer with them use
   * `redactSettings`). Throws InvalidInputError naming the first bad key.
   */
  update (patch: unknown): Settings {
    const parsed = SettingsPatch.safeParse(withoutEchoedSecrets(patch))
    if (!parsed.success) {
      const issue = parsed.error.issues[0]
      const param = issue.code === 'unrecognized_keys' ? issue.keys[0] : String(issue.path[0] ?? '')
      throw new InvalidInputError(`Invalid setting ${param}: ${issue.message}`, param || null)
    }
    const next: Settings = { ...this.#current, ...stripUndefined(parsed.data) }
    if (next.wan_enabled && next.wan_relay_url === '') {
      throw new InvalidInputError('wan_enabled needs a wan_relay_url (ws:// or wss:// URL of a meshnode relay)', 'wan_relay_url')
    }
    const changed = (Object.keys(next) as SettingKey[]).filter((key) => next[key] !== this.#current[key])
    if (changed.length === 0) return this.get()
    const upsert = this.#db.prepare('INSERT INTO settings (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value')
    inTransaction(this.#db, () => {
      for (const key of changed) upsert.run(key, JSON.stringify(next[key]))
    })
    const previous = this.#current
    this.#current = next
    this.#events.emit('change', { previous, current: this.get(), changed })
    return this.get()
  }

  /** Calls `listener` after every committed change. Returns a function that removes it. */
  onChange (listener: (change: SettingsChange) => void): () => void {
    this.#events.on('change', listener)
    return () => { this.#events.off('change', listener) }
  }

  #read (): Settings {
    const rows = this.#db.prepare('SELECT key, value FROM settings').all() as Array<{ key: string, value: string }>
    const stored: Record<string, unknown> = {}
    for (const row of rows) {
      if (row.key in DEFAULT_SETTINGS) stored[row.key] = JSON.parse(row.value)
    }
    // Stored values were validated when written; a value an older version allowed and this one refuses falls back
    // to its default for this run rather than keeping the node from starting.
    const result: Settings = { ...DEFAULT_SETTINGS }
    for (const [key, value] of Object.entries(stored)) {
      const one = SettingsPatch.safeParse({ [key]: value })
      if (one.success) Object.assign(result, one.data)
    }
    return result
  }
}

/** `settings` with each secret replaced by the mask when set, `""` when not. */
export function redactSettings (settings: Settings): Settings {
  const result = { ...settings }
  for (const key of SECRET_SETTINGS) result[key] = result[key] === '' ? '' : SECRET_MASK
  return result
}

function withoutEchoedSecrets (patch: unknown): unknown {
  if (patch == null || typeof patch !== 'object' || Array.isArray(patch)) return patch
  const copy: Record<string, unknown> = { ...patch }
  for (const key of SECRET_SETTINGS) if (copy[key] === SECRET_MASK) delete copy[key]
  return copy
}

function stripUndefined<T extends object> (value: T): Partial<T> {
  return Object.fromEntries(Object.entries(value).filter(([, v]) => v !== undefined)) as Partial<T>
}
