import { readFileSync } from 'node:fs'
import type { Server } from 'node:http'
import { isIP } from 'node:net'
import { networkInterfaces } from 'node:os'
import type { Logger } from 'pino'
import type { TlsCredentials } from './app.ts'
import { drainConnections } from './connections.ts'
import { isLoopbackAddress } from './guards.ts'

export interface NetworkListenerDeps {
  /** A new server for the app, not yet listening (`app.createListener`). */
  createServer: () => Server
  log: Logger
}

export interface NetworkListenerOptions {
  /** The port: the loopback listener's own (known once it listens), so the API is at the same port on every address. */
  port: () => number
  /** The one address to listen on (`--network-host`); null: every non-loopback address of the machine. */
  host: string | null
  /** The loopback listener's address: a wildcard there already covers the network; the same address is not bound twice. */
  primaryHost: string
  /** How often the machine's addresses are looked at again while listening on all of them. Default 30 s. */
  rescanMs?: number
}

const WILDCARDS = new Set(['0.0.0.0', '::', ''])

/**
 * The node on the network (`allow_network_access`): opened when the setting goes on, closed when it goes
 * off, no restart. The loopback listener is never touched, so the CLI and the dashboard on this machine keep working
 * whatever happens here. "All interfaces" binds each non-loopback address of the machine on the loopback listener's
 * port (a wildcard cannot share a port with 127.0.0.1 on Linux) and looks again every `rescanMs` for addresses that
 * came or went. Open and close run one at a time, in the order asked.
 */
export class NetworkListener {
  readonly #deps: NetworkListenerDeps
  readonly #options: Required<NetworkListenerOptions>
  readonly #servers = new Map<string, Server>()
  #queue: Promise<void> = Promise.resolve()
  #rescan: NodeJS.Timeout | null = null
  #wanted = false

  constructor (deps: NetworkListenerDeps, options: NetworkListenerOptions) {
    this.#deps = deps
    this.#options = { rescanMs: 30_000, ...options }
  }

  /** The addresses now listened on, as `host:port` (IPv6 in brackets). */
  addresses (): string[] {
    return [...this.#servers.keys()].map((host) => `${isIP(host.split('%')[0]) === 6 ? `[${host}]` : host}:${this.#options.port()}`)
  }

  /** Listens on the network. Rejects when an explicit `host` cannot be bound; with all interfaces, an address that cannot is logged and tried again later. */
  async open (): Promise<void> {
    return await this.#serialised(async () => {
      this.#wanted = true
      await this.#bind()
      if (this.#options.host == null && this.#rescan == null) {
        this.#rescan = setInterval(() => {
          this.#serialised(async () => { if (this.#wanted) await this.#bind() }).catch((err: unknown) => {
            this.#deps.log.warn({ err }, 'network listener: looking at the addresses again failed')
          })
        }, this.#options.rescanMs)
        this.#rescan.unref()
      }
    })
  }

  /**
   * Stops listening on the network. Requests in flight through it may finish within `graceMs` (the node shutting
   * down); then, or at once with the default 0 (network access switched off), their connections are closed.
   */
  async close (options: { graceMs?: number } = {}): Promise<void> {
    return await this.#serialised(async () => {
      this.#wanted = false
      if (this.#rescan != null) clearInterval(this.#rescan)
      this.#rescan = null
      await Promise.all([...this.#servers.keys()].map(async (host) => { await this.#unbind(host, options.graceMs ?? 0) }))
    })
  }

  async #bind (): Promise<void> {
    const wanted = this.#wantedHosts()
    for (const host of this.#servers.keys()) if (!wanted.includes(host)) await this.#unbind(host)
    for (const host of wanted) {
      if (this.#servers.has(host)) continue
      const server = this.#deps.createServer()
      try {
        await new Promise<void>((resolve, reject) => {
          server.once('error', reject)
          server.listen({ host, port: this.#options.port() }, () => {
            server.off('error', reject)
            resolve()
          })
        })
      } catch (err) {
        if (this.#options.host != null) throw new Error(`Cannot listen on ${host}:${this.#options.port()} (--network-host): ${(err as Error).message}`)
        // An address still being configured (IPv6 duplicate-address detection) or just gone: the next look tries again.
        this.#deps.log.warn({ host, code: (err as NodeJS.ErrnoException).code }, 'network listener: an address cannot be listened on')
        continue
      }
      server.on('error', (err) => { this.#deps.log.error({ err, host }, 'network listener failed') })
      this.#servers.set(host, server)
      this.#deps.log.info({ host, port: this.#options.port() }, 'listening on the network')
    }
  }

  async #unbind (host: string, graceMs = 0): Promise<void> {
    const server = this.#servers.get(host)
    if (server == null) return
    this.#servers.delete(host)
    const closed = new Promise<void>((resolve) => { server.close(() => { resolve() }) }) // once every connection is gone
    const drained = drainConnections(server, graceMs)
    await closed
    drained()
    this.#deps.log.info({ host }, 'stopped listening on the network')
  }

  #wantedHosts (): string[] {
    const { host, primaryHost } = this.#options
    if (WILDCARDS.has(primaryHost)) return [] // the loopback listener is not on loopback only: it already serves the network
    if (host != null) return host === primaryHost ? [] : [host]
    const hosts: string[] = []
    for (const [name, addresses] of Object.entries(networkInterfaces())) {
      for (const address of addresses ?? []) {
        if (address.internal || isLoopbackAddress(address.address) || address.address === primaryHost) continue
        // A link-local IPv6 address is only meaningful with its interface.
        hosts.push(address.family === 'IPv6' && address.address.toLowerCase().startsWith('fe80') ? `${address.address}%${name}` : address.address)
      }
    }
    return hosts
  }

  async #serialised (work: () => Promise<void>): Promise<void> {
    const run = this.#queue.then(work)
    this.#queue = run.catch(() => {}) // the next step runs whatever became of this one; the caller sees the failure
    await run
  }
}

/** Reads `--tls-cert` and `--tls-key`; an error names the file that cannot be read. */
export function readTlsCredentials (files: { certFile: string, keyFile: string }): TlsCredentials {
  const read = (path: string, what: string): Buffer => {
    try {
      return readFileSync(path)
    } catch (err) {
      throw new Error(`Cannot read the TLS ${what} ${path}: ${(err as Error).message}`)
    }
  }
  return { cert: read(files.certFile, 'certificate'), key: read(files.keyFile, 'key') }
}
