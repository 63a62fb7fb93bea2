import type { Connection, Stream } from '@libp2p/interface'
import type { Logger } from 'pino'
import { ProtocolError } from '../../wire/index.ts'
import type { Admission } from './admission.ts'
import type { PeerHost } from '../host/libp2p-node.ts'
import { handleProtocol, peerIdToNodeID } from '../host/peer-ids.ts'

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
      }
    }
  }
}
