import type { Connection, Stream } from '@libp2p/interface'
import type { Logger } from 'pino'
import { ProtocolError } from '../../wire/index.ts'
import type { Admission } from './admission.ts'
import type { PeerHost } from '../host/libp2p-node.ts'
import { handleProtocol, peerIdToNodeID } from '../host/peer-ids.ts'

/**
 * How long a stream may stay open after its handler returned, for the peer to close its side. A requester half-closes
 * right after its request, so by the time the answer is written its side is closed, or is a moment from it; a stream
 * still open after this is reset. Otherwise a peer that never closes its side keeps the stream for as long as the
 * connection lasts, and with it the connection counts as busy (connection-policy.ts): enough of those, and a node at
 * its connection limit refuses everyone new.
 */
export const SERVED_STREAM_GRACE_MS = 5_000

export interface HandleOptions {
  /** Streams one peer may have open at once on this protocol. */
  maxInboundStreams: number
  /**
   * Accept streams from any connected node, not only admitted peers (LAN cluster members, WAN peers while WAN is
   * on). Only admission itself needs this. @default false
   */
  allowStrangers?: boolean
}

/** The remote side of an inbound stream. */
export interface RemotePeer {
  readonly nodeID: string
  readonly connection: Connection
}

export type PeerStreamHandler = (stream: Stream, peer: RemotePeer) => Promise<void>

interface Registration {
  protocol: string
  handler: PeerStreamHandler
  options: HandleOptions
}

export interface ProtocolRegistryDeps {
  admission: Pick<Admission, 'typeOf'>
  /** A handler threw: the stream is already aborted; a malformed, oversized or forged message also costs the peer. */
  failed: (nodeID: string, err: unknown) => Promise<void>
  log: Logger
}

/**
 * Every protocol this node serves, with one guard in front of each handler: who may open the stream (admitted peers,
 * unless the protocol admits strangers), the stream limit, and what a failure costs. Domains register their protocols
 * before the host exists; they are served as soon as it starts, and again after a restart of the host.
 */
export class ProtocolRegistry {
  readonly #deps: ProtocolRegistryDeps
  readonly #registrations = new Map<string, Registration>()
  #host: PeerHost | null = null

  constructor (deps: ProtocolRegistryDeps) {
    this.#deps = deps
  }

  /** Registers a protocol handler; served at once if the host runs, otherwise when it starts. */
  async handle (protocol: string, handler: PeerStreamHandler, options: HandleOptions): Promise<void> {
    if (this.#registrations.has(protocol)) throw new Error(`Protocol ${protocol} is already handled`)
    const registration: Registration = { protocol, handler, options }
    this.#registrations.set(protocol, registration)
    if (this.#host != null) await this.#register(this.#host, registration)
  }

  /** Serves every registered protocol on `host`. */
  async attach (host: PeerHost): Promise<void> {
    this.#host = host
    for (const registration of this.#registrations.values()) await this.#register(host, registration)
  }

  detach (): void {
    this.#host = null
  }

  async #register (host: PeerHost, registration: Registration): Promise<void> {
    await handleProtocol(host, registration.protocol, this.#guard(registration), { maxInboundStreams: registration.options.maxInboundStreams })
  }

  /** Wraps a handler: who may open the stream, and what a failure costs. Nothing a peer sends escapes as a crash. */
  #guard ({ protocol, handler, options }: Registration): (stream: Stream, connection: Connection) => Promise<void> {
    return async (stream, connection) => {
      let nodeID: string
      try {
        nodeID = peerIdToNodeID(connection.remotePeer)
      } catch (err) {
        // Not an Ed25519 key: no meshnode node.
        stream.abort(err instanceof Error ? err : new Error(String(err)))
        return
      }
      if (options.allowStrangers !== true && this.#deps.admission.typeOf(nodeID) == null) {
        this.#deps.log.debug({ nodeID, protocol }, 'stream from a node that is not a peer refused')
        stream.abort(new ProtocolError(`${nodeID} is not a peer of this node`, 'refused'))
        return
      }
      try {
        await handler(stream, { nodeID, connection })
      } catch (err) {
        this.#deps.log.debug({ err, nodeID, protocol }, 'inbound stream failed')
        stream.abort(err instanceof Error ? err : new Error(String(err)))
        await this.#deps.failed(nodeID, err)
        return
      }
      if (!await closedWithin(stream, SERVED_STREAM_GRACE_MS)) {
        this.#deps.log.debug({ nodeID, protocol }, 'the peer kept its side of an answered stream open; reset')
        stream.abort(new ProtocolError(`The exchange is over and the peer did not close its side within ${SERVED_STREAM_GRACE_MS} ms`, 'timeout'))
      }
    }
  }
}

/**
 * Whether `stream` closes (both sides done, or reset) within `ms`. A handler that returned has written its answer and
 * closed its side: every exchange here is over when its handler returns, and nothing more from the peer is read.
 */
async function closedWithin (stream: Stream, ms: number): Promise<boolean> {
  if (stream.status !== 'open' && stream.status !== 'closing') return true
  return await new Promise<boolean>((resolve) => {
    const onClose = (): void => {
      clearTimeout(timer)
      resolve(true)
    }
    const timer = setTimeout(() => {
      stream.removeEventListener('close', onClose)
      resolve(false)
    }, ms)
    stream.addEventListener('close', onClose, { once: true })
  })
}
