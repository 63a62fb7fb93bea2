import { isIP } from 'node:net'
import type { FastifyReply, FastifyRequest } from 'fastify'
import { AuthenticationError, InvalidInputError, PermissionError } from '../errors.ts'
import type { ApiKeys, Principal, Sessions } from '../keys/index.ts'
import type { SettingsStore } from '../settings/index.ts'
import { readSessionCookie } from './session-cookie.ts'
import type { HttpApp } from './types.ts'

export interface GuardOptions {
  /** Host names (besides loopback names and IP literals) this node may be addressed by. */
  allowedHosts: readonly string[]
  /** Browser origins allowed to call the API (`--allowed-origin`); none by default. */
  allowedOrigins: readonly string[]
}

declare module 'fastify' {
  interface FastifyRequest {
    principal: Principal | null
  }
  interface FastifyContextConfig {
    /** No key or session needed (the Host, Origin and loopback guards still apply): the dashboard's files, sign-in. */
    public?: boolean
    /** The shape this route's errors take: OpenAI's envelope (the default) or Anthropic's (errors.ts). */
    errorShape?: 'openai' | 'anthropic'
  }
}

const PUBLIC_ROUTES = new Set(['/health'])

/** What a preflight allows when it names no headers (Access-Control-Request-Headers): ours and the SDKs' own. */
const ALLOWED_HEADERS = 'authorization, content-type, x-ptn-id, x-api-key, anthropic-version, anthropic-beta'
/** Response headers a page on an allowed origin may read: which request it was, where it ran, when to retry. */
const EXPOSED_HEADERS = 'x-request-id, request-id, x-served-by, retry-after, x-meshnode-ignored-tools'
/** A list of header names (RFC 9110 tokens), as Access-Control-Request-Headers holds one. */
const HEADER_NAMES = /^[!#$%&'*+.^_`|~0-9a-z-]+(?:[ \t]*,[ \t]*[!#$%&'*+.^_`|~0-9a-z-]+)*$/i

/**
 * The guards every request passes, in the order it meets them: the Host header (DNS-rebinding guard), the Origin (no browser page
 * of another site may drive the node), the client address (loopback only until network access is on), and the key
 * (required everywhere but /health once network access is on, ignored while it is off).
 */
export function registerGuards (app: HttpApp, deps: { settings: SettingsStore, keys: ApiKeys, sessions: Sessions }, options: GuardOptions): void {
  const allowedHosts = new Set(options.allowedHosts.map((host) => host.toLowerCase()))
  const allowedOrigins = new Set(options.allowedOrigins.map((origin) => origin.toLowerCase().replace(/\/$/, '')))
  app.decorateRequest('principal', null)

  app.addHook('onRequest', async (request: FastifyRequest, reply: FastifyReply) => {
    if (request.headers.host == null) throw new InvalidInputError('The Host header is required', 'host')
    const host = hostName(request.headers.host)
    if (host == null || !(isIP(host) !== 0 || isLoopbackName(host) || allowedHosts.has(host))) {
      throw new PermissionError(`Host not allowed: ${request.headers.host ?? '(none)'}`)
    }

    const origin = request.headers.origin
    // The dashboard's own requests: browsers send Origin on every POST, same-origin included (no CORS headers needed)
    if (origin != null && !isSameOrigin(origin, request.headers.host)) {
      if (!allowedOrigins.has(origin.toLowerCase())) throw new PermissionError(`Origin not allowed: ${origin}`)
      void reply.header('access-control-allow-origin', origin)
      void reply.header('access-control-expose-headers', EXPOSED_HEADERS)
      void reply.header('vary', 'Origin')
      if (request.method === 'OPTIONS') {
        // The headers the page asks for, whatever they are: the official SDKs send their own, and more with each
        // version (x-stainless-*, anthropic-dangerous-direct-browser-access, openai-organization, ...). The origin is
        // trusted already; a header cannot widen what the guards below let it do.
        const requested = request.headers['access-control-request-headers']?.trim()
        void reply.header('access-control-allow-headers', requested != null && HEADER_NAMES.test(requested) ? requested : ALLOWED_HEADERS)
        void reply.header('access-control-allow-methods', 'GET, POST, PATCH, DELETE, OPTIONS')
        void reply.header('access-control-max-age', '600')
        void reply.header('vary', 'Origin, Access-Control-Request-Headers')
        return reply.code(204).send()
      }
    }

    const networkAccess = deps.settings.get().allow_network_access
    if (!networkAccess) {
      if (!isLoopbackAddress(request.socket.remoteAddress)) {
        throw new PermissionError('Network access is disabled: this node answers loopback clients only')
      }
      // Any Authorization header is ignored here, so SDKs that insist on sending a dummy key keep working.
      return
    }
    const path = request.url.split('?')[0]
    if (PUBLIC_ROUTES.has(path) && (request.method === 'GET' || request.method === 'HEAD')) return // HEAD is GET without the body
    const isPublic = request.routeOptions.config?.public === true
    // Anthropic's clients send their key as x-api-key
    const token = bearerToken(request.headers.authorization) ?? apiKeyHeader(request.headers['x-api-key'])
    if (token == null) {
      const session = sessionPrincipal(request, deps.sessions)
      if (session != null) {
        request.principal = session
        return
      }
      if (isPublic) return
      throw new AuthenticationError('An API key is required: send Authorization: Bearer <key> (or x-api-key: <key>)', 'missing_api_key')
    }
    const principal = deps.keys.authenticate(token)
    if (principal == null && !isPublic) throw new AuthenticationError('Invalid or revoked API key', 'invalid_api_key')
    request.principal = principal
  })
}

/**
 * The dashboard's session cookie, as an alternative to the Bearer key (docs/API.md, Dashboard sessions). A cookie
 * is sent by the browser on its own, so a request that changes state must also prove it comes from the dashboard's
 * page: an Origin of this very node (browsers send it on every non-GET fetch) and, where the browser sends it,
 * Sec-Fetch-Site same-origin. SameSite=Strict already keeps other sites' pages from sending the cookie; this also
 * refuses pages on other ports of the same host, which count as the same site.
 */
function sessionPrincipal (request: FastifyRequest, sessions: Sessions): Principal | null {
  const cookie = readSessionCookie(request)
  if (cookie == null) return null
  const principal = sessions.authenticate(cookie)
  if (principal == null) return null
  if (!SAFE_METHODS.has(request.method)) {
    const origin = request.headers.origin
    const site = request.headers['sec-fetch-site']
    if (origin == null || !isSameOrigin(origin, request.headers.host) || (site != null && site !== 'same-origin')) {
      throw new PermissionError('A request signed in by the session cookie that changes state must come from this node\'s own page (same Origin)')
    }
  }
  return principal
}

const SAFE_METHODS = new Set(['GET', 'HEAD', 'OPTIONS'])

/** Whether a browser Origin is this node itself, as the Host header (already checked) names it. */
function isSameOrigin (origin: string, host: string | undefined): boolean {
  if (host == null) return false
  try {
    const url = new URL(origin)
    return (url.protocol === 'http:' || url.protocol === 'https:') && url.host === host.trim().toLowerCase()
  } catch (err) {
    if (err instanceof TypeError) return false // 'null' and other opaque origins
    throw err
  }
}

/**
 * Whose prompt cache a request may reuse (inference's `Requester`): one API key's, or the local owner's (the admin
 * token, or any loopback client while network access is off: both are the machine's owner).
 */
export function requesterOf (principal: Principal | null): string {
  return principal?.kind === 'api-key' ? `key:${principal.keyID}` : 'local'
}

function apiKeyHeader (header: string | string[] | undefined): string | null {
  return typeof header === 'string' && /^\S+$/.test(header.trim()) ? header.trim() : null
}

function bearerToken (header: string | undefined): string | null {
  if (header == null) return null
  const match = /^Bearer\s+(\S+)\s*$/i.exec(header)
  return match?.[1] ?? null
}

/** The host part of a Host header, lower-cased, without port or IPv6 brackets; null when malformed. */
export function hostName (header: string | undefined): string | null {
  if (header == null || header === '') return null
  const value = header.trim().toLowerCase()
  if (value.startsWith('[')) {
    const end = value.indexOf(']')
    return end > 1 ? value.slice(1, end) : null
  }
  const colon = value.lastIndexOf(':')
  const host = colon === -1 ? value : value.slice(0, colon)
  return /^[a-z0-9.-]+$/.test(host) ? host : null
}

function isLoopbackName (host: string): boolean {
  return host === 'localhost' || host.endsWith('.localhost')
}

export function isLoopbackAddress (address: string | undefined): boolean {
  if (address == null) return false
  if (address === '::1') return true
  const v4 = address.startsWith('::ffff:') ? address.slice(7) : address
  return v4.startsWith('127.')
}
