import { createHash, randomBytes } from 'node:crypto'
import type { Principal } from './api-keys.ts'

/** A session ends after this long without a request. */
export const SESSION_IDLE_MS = 12 * 60 * 60 * 1000
/** ... and after this long in any case, so a stolen cookie does not live forever. */
export const SESSION_MAX_AGE_MS = 7 * 24 * 60 * 60 * 1000
/** A one-time sign-in link (`meshnode dashboard`) must be opened within this long. */
export const SIGN_IN_LINK_TTL_MS = 5 * 60 * 1000
/** Bounds on what is held in memory: the oldest session or link goes first. */
export const MAX_SESSIONS = 1000
export const MAX_SIGN_IN_LINKS = 100

export interface IssuedToken {
  /** The secret itself: 256 random bits, base64url. Only its SHA-256 is kept. */
  token: string
  expiresAt: string
}

interface Held {
  principal: Principal
  createdMs: number
  expiresMs: number
}

export interface SessionsDeps {
  /** Whether the principal a session was started for may still act (its API key is not revoked). */
  keys: { isActive: (principal: Principal) => boolean }
}

export interface SessionsOptions {
  /** The clock, in ms; tests move it. Default Date.now. */
  now?: () => number
}

/**
 * Browser sessions of the dashboard. A session stands for the principal that started it (an API key, or
 * the admin token through a one-time sign-in link), so it can do what that principal can and stops when its key is
 * revoked. Held in memory only: a restart signs every browser out, which is the safe failure. Tokens are stored as
 * SHA-256, like API keys, so a heap dump does not hand out sessions.
 */
export class Sessions {
  readonly #keys: SessionsDeps['keys']
  readonly #now: () => number
  readonly #sessions = new Map<string, Held>()
  readonly #links = new Map<string, Held>()

  constructor (deps: SessionsDeps, options: SessionsOptions = {}) {
    this.#keys = deps.keys
    this.#now = options.now ?? Date.now
  }

  /** A one-time token that `redeemSignInLink` turns into a session, once, within SIGN_IN_LINK_TTL_MS. */
  createSignInLink (principal: Principal): IssuedToken {
    return this.#issue(this.#links, principal, SIGN_IN_LINK_TTL_MS, MAX_SIGN_IN_LINKS)
  }

  /** Consumes a sign-in link: a new session, or null for an unknown, used or expired link. */
  redeemSignInLink (token: string): IssuedToken | null {
    const hash = sha256(token)
    const link = this.#links.get(hash)
    this.#links.delete(hash) // one use, whatever happens next
    if (link == null || link.expiresMs <= this.#now() || !this.#keys.isActive(link.principal)) return null
    return this.start(link.principal)
  }

  start (principal: Principal): IssuedToken {
    return this.#issue(this.#sessions, principal, SESSION_IDLE_MS, MAX_SESSIONS)
  }

  /** The principal of a live session (and its idle time restarts), or null. */
  authenticate (token: string): Principal | null {
    const hash = sha256(token)
    const session = this.#sessions.get(hash)
    if (session == null) return null
    const now = this.#now()
    if (session.expiresMs <= now || !this.#keys.isActive(session.principal)) {
      this.#sessions.delete(hash)
      return null
    }
    session.expiresMs = Math.min(now + SESSION_IDLE_MS, session.createdMs + SESSION_MAX_AGE_MS)
    return session.principal
  }

  end (token: string): void {
    this.#sessions.delete(sha256(token))
  }

  #issue (into: Map<string, Held>, principal: Principal, ttlMs: number, max: number): IssuedToken {
    this.#prune(into)
    // Maps iterate in insertion order: the first entry is the oldest.
    while (into.size >= max) into.delete(into.keys().next().value as string)
    const token = randomBytes(32).toString('base64url')
    const now = this.#now()
    const expiresMs = Math.min(now + ttlMs, now + SESSION_MAX_AGE_MS)
    into.set(sha256(token), { principal, createdMs: now, expiresMs })
    return { token, expiresAt: new Date(expiresMs).toISOString() }
  }

  #prune (map: Map<string, Held>): void {
    const now = this.#now()
    for (const [hash, held] of map) if (held.expiresMs <= now) map.delete(hash)
  }
}

function sha256 (value: string): string {
  return createHash('sha256').update(value).digest('hex')
}
