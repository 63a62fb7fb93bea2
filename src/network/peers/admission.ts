import { EventEmitter } from 'node:events'
import type { PeerId } from '@libp2p/interface'
import type { Logger } from 'pino'
import type { NodeID } from '../../identity/index.ts'
import { isHostile } from '../../wire/index.ts'

/** How a peer reached us: found by mDNS and admitted to the LAN cluster, or met through the WAN relay. */
export type PeerType = 'lan' | 'wan'

export interface AdmissionEvents {
  /** Who may talk to us changed (WAN or the cluster switched, a ban): parts re-check the nodes they hold. */
  changed: []
  /** A LAN node proved the cluster passcode. */
  'lan:admitted': [nodeID: string]
  /** A node was banned for a malformed, oversized or forged message. */
  banned: [nodeID: string]
}

export interface AdmissionOptions {
  /** How long a peer that sent a malformed, oversized or forged message stays refused. @default 600_000 */
  banMs?: number
}

/**
 * Who may be this node's peer, the gater of the network (like libp2p's connection gater, with meshnode's rules): a
 * node banned for misbehaving is refused both ways; a LAN node is a peer once it proved the cluster passcode on its
 * current connection, while the cluster is on; any other node is a WAN peer while WAN is on, except the relays themselves.
 * And which PTNs a peer's certificates prove it a member of: the PTN domain's verifier, trusted once it is built.
 */
export class Admission extends EventEmitter<AdmissionEvents> {
  readonly #self: NodeID
  readonly #log: Logger
  readonly #banMs: number
  readonly #banned = new Map<string, number>()
  /** nodeIDs that proved the cluster passcode on their current connection. */
  readonly #lanAdmitted = new Set<string>()
  #clusterOn = false
  #wanOn = false
  #isRelay: ((nodeID: string) => boolean) | null = null
  #ptnVerifier: ((nodeID: string, certificates: string[]) => string[]) | null = null

  constructor (deps: { self: NodeID, log: Logger }, options: AdmissionOptions = {}) {
    super()
    this.#self = deps.self
    this.#log = deps.log
    this.#banMs = options.banMs ?? 600_000
  }

  /** How `nodeID` may talk to us now: as a LAN cluster member, as a WAN peer (WAN on), or not at all. */
  typeOf (nodeID: string): PeerType | null {
    if (this.isBanned(nodeID) || nodeID === this.#self) return null
    if (this.#clusterOn && this.#lanAdmitted.has(nodeID)) return 'lan'
    if (this.#wanOn && this.#isRelay?.(nodeID) !== true) return 'wan'
    return null
  }

  /** Whether `nodeID` is refused for now, after sending a malformed, oversized or forged message. */
  isBanned (nodeID: string): boolean {
    const until = this.#banned.get(nodeID)
    if (until == null) return false
    if (until > Date.now()) return true
    this.#banned.delete(nodeID)
    return false
  }

  /** How many nodes are refused now, or were until moments ago (ended bans go as the next one comes). */
  get bannedCount (): number {
    return this.#banned.size
  }

  /** libp2p's connection gater: a banned peer may not connect, either way. */
  readonly denyPeer = (peer: PeerId): boolean => {
    if (peer.type !== 'Ed25519') return false
    return this.isBanned(Buffer.from(peer.publicKey.raw).toString('hex'))
  }

  /**
   * A peer sent a malformed, oversized or forged message: refused for a while. Returns false, doing nothing, for
   * errors that are not its fault (timeouts, resets).
   */
  banIfHostile (nodeID: string, err: unknown): boolean {
    if (!isHostile(err)) return false
    this.#log.warn({ nodeID, code: err.code, reason: err.message }, 'peer sent a malformed, oversized or forged message; disconnecting it')
    const now = Date.now()
    // Kept in the order the bans end (each lasts banMs): the ended ones at the front go as each new one comes, so
    // bans of fresh keys that never come back do not pile up
    this.#banned.delete(nodeID)
    for (const [banned, until] of this.#banned) {
      if (until > now) break
      this.#banned.delete(banned)
    }
    this.#banned.set(nodeID, now + this.#banMs)
    this.#lanAdmitted.delete(nodeID)
    this.emit('banned', nodeID)
    return true
  }

  /** The cluster is on (with a passcode every member must prove) or off; off forgets every admitted LAN node. */
  setCluster (on: boolean): void {
    if (this.#clusterOn === on && on) return
    this.#clusterOn = on
    this.#lanAdmitted.clear()
    this.emit('changed')
  }

  get clusterOn (): boolean {
    return this.#clusterOn
  }

  /** A LAN node proved the passcode. Ignored while the cluster is off. */
  admitLan (nodeID: string): void {
    if (!this.#clusterOn || this.#lanAdmitted.has(nodeID) || this.isBanned(nodeID)) return
    this.#lanAdmitted.add(nodeID)
    this.#log.info({ nodeID }, 'LAN cluster peer admitted')
    this.emit('lan:admitted', nodeID)
  }

  isLanAdmitted (nodeID: string): boolean {
    return this.#lanAdmitted.has(nodeID)
  }

  /** Its last connection closed: it proves the passcode again when it comes back. */
  disconnected (nodeID: string): void {
    this.#lanAdmitted.delete(nodeID)
  }

  /** WAN is on (every node but a relay may be a peer) or off. `isRelay` tells the relays, once they are known. */
  setWan (on: boolean, isRelay: ((nodeID: string) => boolean) | null = null): void {
    this.#wanOn = on
    this.#isRelay = on ? isRelay : null
    this.emit('changed')
  }

  /**
   * Trusts the PTN domain's check of the certificates a peer presents (signature by the PTN's CA, expiry, issued to
   * that node). Until then no certificate counts.
   */
  trustPtnCertificates (verify: (nodeID: string, certificates: string[]) => string[]): void {
    this.#ptnVerifier = verify
    this.emit('changed')
  }

  /** The PTNs `nodeID`'s certificates prove it a member of; an unverifiable certificate counts for nothing. */
  ptnIDsOf (nodeID: string, certificates: string[]): string[] {
    if (certificates.length === 0 || this.#ptnVerifier == null) return []
    try {
      return this.#ptnVerifier(nodeID, certificates)
    } catch (err) {
      // The verifier's bug must not keep a peer out of the table; it is only not counted as a PTN member.
      this.#log.error({ err, nodeID }, 'verifying peer PTN certificates failed')
      return []
    }
  }
}
