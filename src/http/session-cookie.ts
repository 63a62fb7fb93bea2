// The dashboard's session cookie: how it is named, read, set and cleared. Guards read it; the session
// routes set and clear it.
import type { FastifyReply, FastifyRequest } from 'fastify'

/**
 * Cookies are shared by every port of a host, so two nodes on one machine (or a node and a dev server) would
 * overwrite each other's cookie: the name carries the port the request came in on.
 */
export function sessionCookieName (request: FastifyRequest): string {
  const port = request.socket.localPort
  return port == null ? 'meshnode_session' : `meshnode_session_${port}`
}

/** The session token the browser sent, or null. */
export function readSessionCookie (request: FastifyRequest): string | null {
  const header = request.headers.cookie
  if (header == null) return null
  const name = sessionCookieName(request)
  for (const part of header.split(';')) {
    const eq = part.indexOf('=')
    if (eq !== -1 && part.slice(0, eq).trim() === name) {
      const value = part.slice(eq + 1).trim()
      return /^[A-Za-z0-9_-]{1,128}$/.test(value) ? value : null
    }
  }
  return null
}

/**
 * HttpOnly: page scripts never see it. SameSite=Strict: no other site's page makes the browser send it. No Max-Age:
 * it lasts the browser session, and the node ends it sooner when idle. `Secure` whenever the request came over TLS.
 */
export function setSessionCookie (request: FastifyRequest, reply: FastifyReply, token: string): void {
  void reply.header('set-cookie', `${sessionCookieName(request)}=${token}; Path=/; HttpOnly; SameSite=Strict${request.protocol === 'https' ? '; Secure' : ''}`)
}

export function clearSessionCookie (request: FastifyRequest, reply: FastifyReply): void {
  void reply.header('set-cookie', `${sessionCookieName(request)}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0`)
}
