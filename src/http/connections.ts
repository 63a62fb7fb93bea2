import type { Server, ServerOptions } from 'node:http'
import { createServer, type Socket } from 'node:net'
import type { Logger } from 'pino'
import { isLoopbackAddress } from './guards.ts'

/**
 * How long a client may take and how many connections it may hold: a slow or greedy client cannot keep
 * connections, and with them sockets and memory, for minutes. Each default is stated; tests shorten them.
 */
export interface ConnectionLimits {
  /** The request line and headers must have arrived within this. Default 10 s. */
  headersTimeoutMs: number
  /** The whole request, body included, within this; a trickled body is answered 408 and closed. Default 30 s. */
  requestTimeoutMs: number
  /** An idle keep-alive connection is closed after this. Default 10 s. */
  keepAliveTimeoutMs: number
  /** Connections one client address on the network may hold open at once; the next is answered 429 and closed. Default 64. */
  maxConnectionsPerAddress: number
  /**
   * The same for each loopback address: this machine's own tools (the CLI, the dashboard, an SDK's connection pool,
   * a benchmark) may open many more, but a runaway local script still cannot take every file descriptor. Default 1024.
   */
  maxLoopbackConnections: number
}

export const DEFAULT_CONNECTION_LIMITS: Readonly<ConnectionLimits> = Object.freeze({
  headersTimeoutMs: 10_000,
  requestTimeoutMs: 30_000,
  keepAliveTimeoutMs: 10_000,
  maxConnectionsPerAddress: 64,
  maxLoopbackConnections: 1024
})

/** Node's server options for `limits`; the timeouts are checked every second (Node's default is every 30 s). */
export function serverOptions (limits: ConnectionLimits): ServerOptions {
  return {
    headersTimeout: limits.headersTimeoutMs,
    requestTimeout: limits.requestTimeoutMs,
    keepAliveTimeout: limits.keepAliveTimeoutMs,
    connectionsCheckingInterval: Math.min(1_000, limits.headersTimeoutMs),
    // Node would answer a request without Host with a bare 400 and no body; the Host guard refuses it in the envelope
    requireHostHeader: false
  }
}

/**
 * Drains a server that is closing: a connection is closed as soon as its last request has finished (a kept-alive
 * client would otherwise hold the close, and a SIGTERM, for its whole keep-alive timeout), and every connection is cut
 * once `graceMs` is over. Call the function it returns when the server has closed.
 */
export function drainConnections (server: Server, graceMs: number): () => void {
  server.closeIdleConnections()
  const sweep = setInterval(() => { server.closeIdleConnections() }, 100)
  const cut = setTimeout(() => { server.closeAllConnections() }, graceMs)
  return () => { clearInterval(sweep); clearTimeout(cut) }
}

/**
 * Caps the connections each client address holds, across every server it watches (the loopback listener and the
 * network ones share one count). The one over the cap is answered 429 in the envelope and closed at once, before any
 * of its bytes are read as a request.
 */
export class ConnectionCap {
  readonly #max: number
  readonly #maxLoopback: number
  readonly #log: Logger
  readonly #open = new Map<string, number>()

  constructor (deps: { log: Logger }, options: { maxPerAddress: number, maxLoopback: number }) {
    this.#log = deps.log
    this.#max = options.maxPerAddress
    this.#maxLoopback = options.maxLoopback
  }

  watch (server: Server): void {
    // Ahead of Node's own listener, so a refused socket is closed before the HTTP parser reads from it.
    server.prependListener('connection', (socket: Socket) => { this.#admit(socket) })
  }

  #admit (socket: Socket): void {
    const address = socket.remoteAddress ?? ''
    const count = this.#open.get(address) ?? 0
    const max = isLoopbackAddress(address) ? this.#maxLoopback : this.#max
    if (count >= max) {
      this.#log.warn({ address, open: count }, 'connection refused: too many from one address')
      const body = JSON.stringify({ error: { message: `Too many connections from ${address}: at most ${max} at once`, type: 'rate_limit_error', param: null, code: null } })
      // Written at once (a fresh socket is writable) and destroyed, so Node's HTTP listener, which runs next, finds
      // a closed socket and parses nothing from it.
      socket.write(`HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n` +
        `Retry-After: 1\r\nConnection: close\r\n\r\n${body}`)
      socket.destroy()
      return
    }
    this.#open.set(address, count + 1)
    socket.once('close', () => {
      const left = (this.#open.get(address) ?? 1) - 1
      if (left === 0) this.#open.delete(address)
      else this.#open.set(address, left)
    })
  }
}

/**
 * Resolves when `port` on `host` can be listened on now; rejects with the listen error (EADDRINUSE) otherwise. A node
 * checks it before it opens anything, so that a start on a taken port fails at once, having changed nothing.
 */
export async function ensurePortFree (host: string, port: number): Promise<void> {
  const probe = createServer()
  await new Promise<void>((resolve, reject) => {
    probe.once('error', reject)
    probe.listen({ host, port, exclusive: true }, () => { resolve() })
  })
  await new Promise<void>((resolve) => { probe.close(() => { resolve() }) })
}
