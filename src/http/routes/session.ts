import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod'
import { z } from 'zod'
import { AuthenticationError } from '../../errors.ts'
import type { ApiKeys, Sessions } from '../../keys/index.ts'
import type { SettingsStore } from '../../settings/index.ts'
import { errorResponses } from '../schemas/common.ts'
import { SessionState, SignedIn, SignedOut, SignInBody, SignInLink, SignInQuery } from '../schemas/session.ts'
import { clearSessionCookie, readSessionCookie, setSessionCookie } from '../session-cookie.ts'

export interface SessionRoutesOptions {
  sessions: Sessions
  keys: ApiKeys
  settings: SettingsStore
}

/** Where the dashboard lives, and where a used or expired sign-in link sends the browser. */
const DASHBOARD_PATH = '/'
const LINK_FAILED_PATH = '/#/sign-in?link=expired'

/**
 * Dashboard sign-in: an API key typed into the page, or a one-time link from `meshnode dashboard`, becomes
 * an HttpOnly, SameSite=Strict session cookie. Neither the key nor a token is ever put in storage the page can read,
 * and the link's token leaves the address bar with the redirect that redeems it.
 */
export const sessionRoutes: FastifyPluginAsyncZod<SessionRoutesOptions> = async (app, { sessions, keys, settings }) => {
  const tags = ['session']
  const open = { public: true }

  app.get('/v1/app/session', { config: open, schema: { summary: 'Whether this browser is signed in', tags, response: { 200: SessionState, ...errorResponses } } }, async (request) => {
    const signInRequired = settings.get().allow_network_access
    return { signInRequired, signedIn: request.principal != null }
  })

  app.post('/v1/app/session', { config: open, schema: { summary: 'Sign the dashboard in with an API key', tags, body: SignInBody, response: { 200: SignedIn, ...errorResponses } } }, async (request, reply) => {
    const principal = keys.authenticate(request.body.apiKey)
    if (principal == null) throw new AuthenticationError('Invalid or revoked API key', 'invalid_api_key')
    const session = sessions.start(principal)
    setSessionCookie(request, reply, session.token)
    return { signedIn: true as const, expiresAt: session.expiresAt }
  })

  app.post('/v1/app/session/sign-out', { config: open, schema: { summary: 'Sign the dashboard out', tags, response: { 200: SignedOut, ...errorResponses } } }, async (request, reply) => {
    const token = readSessionCookie(request)
    if (token != null) sessions.end(token)
    clearSessionCookie(request, reply)
    return { signedIn: false as const }
  })

  // With network access off, only loopback clients get here, and they may already do anything: the link then
  // carries the admin token's rights, so the session stays valid if network access is switched on later.
  app.post('/v1/app/session/link', { schema: { summary: 'A one-time dashboard sign-in link', tags, response: { 200: SignInLink, ...errorResponses } } }, async (request) => {
    const link = sessions.createSignInLink(request.principal ?? { kind: 'admin-token' })
    return { url: `${request.protocol}://${request.headers.host ?? 'localhost'}/sign-in?token=${link.token}`, expiresAt: link.expiresAt }
  })

  app.get('/sign-in', {
    config: open,
    schema: { summary: 'Redeem a one-time sign-in link', tags, querystring: SignInQuery, response: { 303: z.null().describe('to the dashboard'), ...errorResponses } }
  }, async (request, reply) => {
    const session = request.query.token == null ? null : sessions.redeemSignInLink(request.query.token)
    if (session != null) setSessionCookie(request, reply, session.token)
    // No referrer carries the token on, and the page it lands on has a URL without it.
    void reply.header('referrer-policy', 'no-referrer').header('cache-control', 'no-store')
    return await reply.redirect(session == null ? LINK_FAILED_PATH : DASHBOARD_PATH, 303)
  })
}
