import type { PeerInfo as Libp2pPeerInfo } from '@libp2p/interface'
import type { Logger } from 'pino'
import type { NodeID } from '../../identity/index.ts'
import { ProtocolError } from '../../wire/index.ts'
import type { Admission } from '../peers/admission.ts'
import { CLUSTER_PROTOCOL, MAX_INBOUND_CLUSTER_STREAMS, createClusterHandler, deriveClusterKey, joinCluster } from './cluster.ts'
import type { PeerHost } from '../host/libp2p-node.ts'
import { peerIdToNodeID } from '../host/peer-ids.ts'
import type { ProtocolRegistry } from '../peers/protocol-registry.ts'

export interface LanClusterDeps {
  self: NodeID
  admission: Admission
  registry: ProtocolRegistry
  /** Hangs up on a node that turned out to be no peer (a failed handshake); an admitted one keeps its connection. */
  hangUpIfStranger: (nodeID: string, why: string) => Promise<void>
  log: Logger
}

export interface LanClusterOptions {
  /** Listened on while `cluster_enabled` is on. */
  listen: string[]
  /** Deadline of one handshake, the dial included. @default 15_000 */
  handshakeTimeoutMs?: number
  /**
   * How long the node whose id is the higher of two waits for the other to dial it before it dials itself (when the
   * other's mDNS never finds it). @default 5_000
   */
  answerWaitMs?: number
}

/**
 * LAN presence (the `cluster_enabled` and `cluster_passcode` settings): while on, a listener on the LAN and mDNS (the
 * host's `lanPresence` service); every meshnode node mDNS finds is dialed and must prove the passcode, as this node
 * proves it to them, before it is admitted. Off, or a new passcode, starts the cluster over.
 */
export class LanCluster {
  readonly #deps: LanClusterDeps
  readonly #listen: string[]
  readonly #handshakeTimeoutMs: number
  readonly #answerWaitMs: number
  /** nodeIDs found by mDNS whose handshake is under way, or that this node waits for to dial it. */
  readonly #joining = new Set<string>()
  /** nodeIDs whose handshake this node is answering now. */
  readonly #answering = new Set<string>()
  #host: PeerHost | null = null
  #shutdown: AbortController | null = null
  #key: Promise<Buffer> | null = null
  #passcode: string | null = null

  constructor (deps: LanClusterDeps, options: LanClusterOptions) {
    this.#deps = deps
    this.#listen = options.listen
    this.#handshakeTimeoutMs = options.handshakeTimeoutMs ?? 15_000
    this.#answerWaitMs = options.answerWaitMs ?? 5_000
  }

  /** Registers the cluster protocol (strangers may open it: it is how they become peers). */
  async register (): Promise<void> {
    const respond = createClusterHandler({
      key: async () => this.#deps.admission.clusterOn && this.#key != null ? await this.#key : null,
      localNodeID: this.#deps.self,
      admit: (nodeID) => { this.#deps.admission.admitLan(nodeID) }
    })
    await this.#deps.registry.handle(CLUSTER_PROTOCOL, async (stream, peer) => {
      this.#answering.add(peer.nodeID)
      try {
        const admitted = await respond(stream, peer.nodeID)
        if (!admitted) await this.#deps.hangUpIfStranger(peer.nodeID, 'cluster handshake failed')
      } finally {
        this.#answering.delete(peer.nodeID)
      }
    }, { maxInboundStreams: MAX_INBOUND_CLUSTER_STREAMS, allowStrangers: true })
  }

  attach (host: PeerHost): void {
    this.#host = host
    this.#shutdown = new AbortController()
  }

  /** Switches the cluster on or off, or starts it over with a new passcode. Returns whether anything changed. */
  async apply (on: boolean, passcode: string): Promise<boolean> {
    const host = this.#host
    if (host == null) return false
    const running = this.#deps.admission.clusterOn
    if (on === running && !(on && passcode !== this.#passcode)) return false
    if (running) {
      // Off, or a new passcode: every member must prove the new one, so the cluster starts over.
      this.#key = null
      this.#passcode = null
      await host.services.lanPresence.disable()
      this.#deps.admission.setCluster(false)
      this.#deps.log.info('LAN cluster stopped')
    }
    if (!on) return true
    this.#passcode = passcode
    this.#key = deriveClusterKey(passcode)
    await this.#key
    this.#deps.admission.setCluster(true)
    await host.services.lanPresence.enable(this.#listen, (found) => { this.#found(found) })
    this.#deps.log.info({ passcode: passcode !== '' }, 'LAN cluster started')
    return true
  }

  async stop (): Promise<void> {
    this.#shutdown?.abort()
    this.#shutdown = null
    this.#host = null
    this.#key = null
    this.#passcode = null
  }

  /** mDNS found a meshnode node: connect and prove the passcode (the other side proves it to us at the same time). */
  #found (found: Libp2pPeerInfo): void {
    let nodeID: string
    try {
      nodeID = peerIdToNodeID(found.id)
    } catch (err) {
      if (err instanceof ProtocolError) return   // not a meshnode node
      throw err
    }
    const signal = this.#shutdown?.signal
    const host = this.#host
    const key = this.#key
    if (signal == null || signal.aborted || host == null || key == null) return
    const { admission } = this.#deps
    if (nodeID === this.#deps.self || admission.isLanAdmitted(nodeID) || admission.isBanned(nodeID) || this.#joining.has(nodeID)) return
    // Both nodes' mDNS find each other at about the same moment. Were both to dial, each would close one of the two
    // connections (connection-policy.ts keeps one per peer) under a handshake running on it. So the lower id dials and
    // the higher answers; the higher dials too only when no handshake has come after a while.
    const wait = this.#deps.self > nodeID ? this.#answerWaitMs : 0
    this.#joining.add(nodeID)
    this.#join(host, nodeID, found, key, signal, wait).catch((err: unknown) => {
      this.#deps.log.error({ err, nodeID }, 'LAN handshake failed unexpectedly')
    }).finally(() => { this.#joining.delete(nodeID) })
  }

  async #join (host: PeerHost, nodeID: string, found: Libp2pPeerInfo, key: Promise<Buffer>, signal: AbortSignal, waitMs: number): Promise<void> {
    if (waitMs > 0) {
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, waitMs)
        signal.addEventListener('abort', () => { clearTimeout(timer); resolve() }, { once: true })
      })
      if (signal.aborted || key !== this.#key || this.#deps.admission.isLanAdmitted(nodeID) || this.#answering.has(nodeID)) return
    }
    const deadline = AbortSignal.any([signal, AbortSignal.timeout(this.#handshakeTimeoutMs)])
    try {
      if (host.getConnections(found.id).length === 0) {
        await host.dial(found.multiaddrs.map(ma => ma.encapsulate(`/p2p/${found.id.toString()}`)), { signal: deadline })
      }
      await joinCluster(host, found.id, { key: await key, localNodeID: this.#deps.self, remoteNodeID: nodeID, signal: deadline })
      if (key !== this.#key) return   // the passcode changed meanwhile; the new one must be proven
      this.#deps.admission.admitLan(nodeID)
    } catch (err) {
      if (signal.aborted) return
      this.#deps.log.info({ nodeID, reason: (err as Error).message }, 'LAN node not admitted to the cluster')
      await this.#deps.hangUpIfStranger(nodeID, 'cluster handshake failed')
    }
  }
}
