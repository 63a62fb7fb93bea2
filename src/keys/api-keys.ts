import { createHash, randomBytes, randomUUID, timingSafeEqual } from 'node:crypto'
import { EventEmitter } from 'node:events'
import { InvalidInputError, NotFoundError } from '../errors.ts'
import { inTransaction, type Database } from '../store/index.ts'

export const API_KEY_PREFIX = 'mn_'

/**
 * What a key may call: `admin` everything (as every key did before scopes), `inference` only the OpenAI-compatible
 * endpoints, so a key handed to a chat client cannot make keys, change settings, spend credits or touch PTNs.
 */
export const API_KEY_SCOPES = ['admin', 'inference'] as const
export type ApiKeyScope = typeof API_KEY_SCOPES[number]

export interface ApiKeyRecord {
  id: string
  name: string
  prefix: string
  created: string
  lastUsed: string | null
  status: 'active' | 'revoked'
  scope: ApiKeyScope
}

export interface GeneratedApiKey {
  id: string
  name: string
  key: string
  created: string
  scope: ApiKeyScope
}

interface CachedKey {
  id: string
  hash: Buffer
  revoked: boolean
  scope: ApiKeyScope
}

/** Who a request authenticated as. The admin token is admin. */
export type Principal = { kind: 'api-key', keyID: string, scope: ApiKeyScope } | { kind: 'admin-token' }

export function scopeOf (principal: Principal): ApiKeyScope {
  return principal.kind === 'admin-token' ? 'admin' : principal.scope
}

/**
 * API keys: 256 random bits shown once, stored only as SHA-256, compared in constant time.
 * Key hashes are cached in memory because every request is checked against them. `lastUsed` is kept in memory and
 * flushed in batches (`flushUsage`), so authenticating a request never writes to the database.
 */
export class ApiKeys {
  readonly #db: Database
  readonly #adminTokenHash: Buffer
  #keys: CachedKey[] = []
  readonly #pendingUsage = new Map<string, string>()
  readonly #revoked = new EventEmitter<{ revoked: [keyID: string] }>()

  constructor (deps: { db: Database }, options: { adminToken: string }) {
    this.#db = deps.db
    this.#adminTokenHash = sha256(options.adminToken)
    this.#reload()
  }

  generate (name: string, scope: ApiKeyScope = 'admin'): GeneratedApiKey {
    const trimmed = name.trim()
    if (trimmed === '') throw new InvalidInputError('name must not be empty', 'name')
    if (!API_KEY_SCOPES.includes(scope)) throw new InvalidInputError(`scope must be one of ${API_KEY_SCOPES.join(', ')}`, 'scope')
    const key = API_KEY_PREFIX + randomBytes(32).toString('base64url')
    const record = { id: randomUUID(), name: trimmed, created: new Date().toISOString(), scope }
    this.#db.prepare('INSERT INTO api_keys (id, name, hash, prefix, created, scope) VALUES (?, ?, ?, ?, ?, ?)')
      .run(record.id, record.name, sha256(key).toString('hex'), maskKey(key), record.created, scope)
    this.#keys.push({ id: record.id, hash: sha256(key), revoked: false, scope })
    return { id: record.id, name: record.name, key, created: record.created, scope }
  }

  list (): ApiKeyRecord[] {
    const rows = this.#db.prepare(`SELECT k.id, k.name, k.prefix, k.created, k.revoked_at, k.scope, u.last_used
      FROM api_keys k LEFT JOIN api_key_usage u ON u.id = k.id ORDER BY k.created, k.id`).all() as Array<{
      id: string, name: string, prefix: string, created: string, revoked_at: string | null, scope: ApiKeyScope, last_used: string | null
    }>
    return rows.map((row) => ({
      id: row.id,
      name: row.name,
      prefix: row.prefix,
      created: row.created,
      lastUsed: this.#pendingUsage.get(row.id) ?? row.last_used,
      status: row.revoked_at == null ? 'active' : 'revoked',
      scope: row.scope
    }))
  }

  /** Revokes at once. Revoking an already revoked key succeeds again; an unknown id is NotFound. */
  revoke (id: string): void {
    const row = this.#db.prepare('SELECT revoked_at FROM api_keys WHERE id = ?').get(id) as { revoked_at: string | null } | undefined
    if (row == null) throw new NotFoundError(`API key not found: ${id}`)
    if (row.revoked_at == null) {
      this.#db.prepare('UPDATE api_keys SET revoked_at = ? WHERE id = ?').run(new Date().toISOString(), id)
    }
    for (const key of this.#keys) if (key.id === id) key.revoked = true
    this.#revoked.emit('revoked', id)
  }

  /** Calls `listener` with the id of each key revoked (again or for the first time). Returns a function that removes it. */
  onRevoke (listener: (keyID: string) => void): () => void {
    this.#revoked.on('revoked', listener)
    return () => { this.#revoked.off('revoked', listener) }
  }

  /**
   * Returns who `token` is, or null for an unknown or revoked key. Every candidate is compared, in constant time,
   * so the time taken does not tell an attacker how close a guess was or which key matched.
   */
  authenticate (token: string): Principal | null {
    const hash = sha256(token)
    let match: CachedKey | null = null
    for (const key of this.#keys) {
      if (timingSafeEqual(key.hash, hash) && !key.revoked) match = key
    }
    const isAdmin = timingSafeEqual(this.#adminTokenHash, hash)
    if (match != null) {
      this.#pendingUsage.set(match.id, new Date().toISOString())
      return { kind: 'api-key', keyID: match.id, scope: match.scope }
    }
    return isAdmin ? { kind: 'admin-token' } : null
  }

  /** Whether `principal` may still act: the admin token always, a key until it is revoked (sessions ask this). */
  isActive (principal: Principal): boolean {
    if (principal.kind === 'admin-token') return true
    return this.#keys.some((key) => key.id === principal.keyID && !key.revoked)
  }

  /** Writes the `lastUsed` times gathered since the last flush, in one transaction. */
  flushUsage (): void {
    if (this.#pendingUsage.size === 0) return
    const upsert = this.#db.prepare('INSERT INTO api_key_usage (id, last_used) VALUES (?, ?) ON CONFLICT (id) DO UPDATE SET last_used = excluded.last_used')
    const batch = [...this.#pendingUsage]
    inTransaction(this.#db, () => {
      for (const [id, at] of batch) upsert.run(id, at)
    })
    for (const [id, at] of batch) if (this.#pendingUsage.get(id) === at) this.#pendingUsage.delete(id)
  }

  #reload (): void {
    const rows = this.#db.prepare('SELECT id, hash, revoked_at, scope FROM api_keys').all() as Array<{ id: string, hash: string, revoked_at: string | null, scope: ApiKeyScope }>
    this.#keys = rows.map((row) => ({ id: row.id, hash: Buffer.from(row.hash, 'hex'), revoked: row.revoked_at != null, scope: row.scope }))
  }
}

/** A key as listings show it: the first 12 characters, an ellipsis, the last four. */
export function maskKey (key: string): string {
  return `${key.slice(0, 12)}...${key.slice(-4)}`
}

function sha256 (value: string): Buffer {
  return createHash('sha256').update(value).digest()
}
