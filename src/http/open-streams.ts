import type { ServerResponse } from 'node:http'
import type { FastifyRequest } from 'fastify'
import { AuthenticationError, PermissionError } from '../errors.ts'
import type { ApiKeys } from '../keys/index.ts'
import type { SettingsStore } from '../settings/index.ts'
import { streamErrorEvent, toEnvelope } from './errors.ts'
import { isLoopbackAddress } from './guards.ts'
import { cutStream } from './sse.ts'
import type { HttpApp } from './types.ts'

declare module 'fastify' {
  interface FastifyInstance {
    /** Every server-sent event stream now open, with the request that opened it (`startSse` adds them). */
    openStreams: OpenStreams
  }
}

/**
 * The SSE streams now open (chat streams, /v1/app/events), each with the request that opened it: who it
 * authenticated as and from where. A guard decides only when a request starts; a stream outlives that decision, so
 * when the answer changes (a key revoked, network access switched) the streams it no longer covers are cut here.
 */
export class OpenStreams {
  readonly #open = new Map<ServerResponse, FastifyRequest>()

  get size (): number {
    return this.#open.size
  }

  add (request: FastifyRequest, raw: ServerResponse): void {
    this.#open.set(raw, request)
    raw.once('close', () => { this.#open.delete(raw) })
  }

  /**
   * Ends every stream whose request `ends` selects with `reason` as a last `error` event, in its route's dialect;
   * returns how many.
   */
  cut (ends: (request: FastifyRequest) => boolean, reason: Error): number {
    let count = 0
    for (const [raw, request] of this.#open) {
      if (!ends(request)) continue
      const envelope = toEnvelope(reason, request.id, request.log).body
      cutStream(raw, (sequence) => streamErrorEvent(envelope, request, sequence))
      this.#open.delete(raw)
      count++
    }
    return count
  }
}

/**
 * Revoking a key ends the streams opened with it (or with a session made from it); switching network
 * access on ends those opened without a key, and switching it off ends those of non-loopback clients.
 */
export function registerStreamRevocation (app: HttpApp, deps: { keys: ApiKeys, settings: SettingsStore }): void {
  const streams = new OpenStreams()
  app.decorate('openStreams', streams)
  const stopRevocations = deps.keys.onRevoke((keyID) => {
    const cut = streams.cut((request) => request.principal?.kind === 'api-key' && request.principal.keyID === keyID,
      new AuthenticationError(`API key ${keyID} was revoked`, 'invalid_api_key'))
    if (cut > 0) app.log.info({ keyID, streams: cut }, 'streams of a revoked key ended')
  })
  const stopSettings = deps.settings.onChange(({ changed, current }) => {
    if (!changed.includes('allow_network_access')) return
    const cut = current.allow_network_access
      ? streams.cut((request) => request.principal == null,
        new AuthenticationError('Network access was switched on: every request needs an API key, and this stream was opened without one', 'missing_api_key'))
      : streams.cut((request) => !isLoopbackAddress(request.socket.remoteAddress),
        new PermissionError('Network access was switched off: this node answers loopback clients only'))
    if (cut > 0) app.log.info({ networkAccess: current.allow_network_access, streams: cut }, 'streams no longer allowed ended')
  })
  app.addHook('onClose', async () => {
    stopRevocations()
    stopSettings()
  })
}
