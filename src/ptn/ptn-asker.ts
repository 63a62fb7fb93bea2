import { UnavailableError } from '../errors.ts'
import type { NodeIdentity } from '../identity/index.ts'
import { caFromHex } from './ca-keys.ts'
import { verifyCertificate } from './certificates.ts'
import { CaKeyMismatchError, InvalidCertificateError } from './errors.ts'
import type { MembershipStore } from './membership-store.ts'
import { askPtnPeer, type PtnPeers, type PtnReply, type PtnRequest } from './protocol.ts'
import type { VerifiedCertificates } from './verified-certificates.ts'

export interface PtnAskerDeps {
  identity: NodeIdentity
  /** The peer network; null when it is not running, and then every ask answers 503. */
  peers: PtnPeers | null
  store: MembershipStore
  /** Checks the certificates peers present in their capability records. */
  certificates: VerifiedCertificates
}

export interface PtnAskerOptions {
  /** Deadline of one exchange with another node. @default 10_000 */
  requestTimeoutMs?: number
  /** The clock the certificates admins answer with are judged by, in epoch milliseconds. @default Date.now */
  now?: () => number
}

/**
 * The asking side of the PTN protocol: one request to another node and its answer, which nodes can be asked (the
 * admins of a PTN, the members of one), and the checks of what an asked node sends back. An answer that cannot be
 * used is the asked node's fault, not the caller's request: an `UnavailableError` (503).
 */
export class PtnAsker {
  readonly #identity: NodeIdentity
  readonly #peers: PtnPeers | null
  readonly #store: MembershipStore
  readonly #certificates: VerifiedCertificates
  readonly #requestTimeoutMs: number
  readonly #now: () => number

  constructor (deps: PtnAskerDeps, options: PtnAskerOptions = {}) {
    this.#identity = deps.identity
    this.#peers = deps.peers
    this.#store = deps.store
    this.#certificates = deps.certificates
    this.#requestTimeoutMs = options.requestTimeoutMs ?? 10_000
    this.#now = options.now ?? (() => Date.now())
  }

  async ask (nodeID: string, request: PtnRequest, options: { signal?: AbortSignal }): Promise<PtnReply> {
    if (this.#peers == null) throw new UnavailableError('The peer network is not running; enable WAN or LAN networking to reach other nodes')
    if (!this.#peers.isKnownPeer(nodeID)) throw new UnavailableError(`Node ${nodeID} is not reachable`)
    return await askPtnPeer(this.#peers, this.#identity, nodeID, request, { signal: options.signal, timeoutMs: this.#requestTimeoutMs })
  }

  /** The peers and the PTNs each proves; none while the network is not running. */
  peers (): ReturnType<PtnPeers['peers']> {
    return this.#peers?.peers() ?? []
  }

  /** Whether `nodeID` is a member of `ptnID` as far as this node can tell: known to it, or presenting a valid
   *  certificate of the PTN in its capability record. */
  isKnownMember (ptnID: string, nodeID: string): boolean {
    if (this.#store.member(ptnID, nodeID)?.status === 'active') return true
    const record = this.#peers?.peers().find(peer => peer.nodeID === nodeID)?.record
    return record?.ptnCertificates.some(certData => this.#certificates.check(certData, { ptnID, nodeID }) != null) === true
  }

  /**
   * The admins of `ptnID` that can be reached now, other than this node: those this node knows of (most recently
   * confirmed first), then `extra` candidates, then peers whose capability records present a valid admin certificate.
   */
  reachableAdmins (ptnID: string, extra: string[] = []): string[] {
    const peers = this.#peers
    if (peers == null) return []
    const candidates = [...this.#store.otherAdmins(ptnID), ...extra]
    for (const peer of peers.peers()) {
      const advertised = peer.record.ptnCertificates.some(certData => this.#certificates.check(certData, { ptnID, nodeID: peer.nodeID })?.role === 'admin')
      if (advertised) candidates.push(peer.nodeID)
    }
    return [...new Set(candidates)].filter(nodeID => nodeID !== this.#identity.nodeID && peers.isKnownPeer(nodeID))
  }

  /** The certificate for this node in `from`'s answer, checked. */
  certificateFrom (reply: PtnReply, from: string, ptnID: string): string {
    if (reply.type !== 'cert') throw new UnavailableError(`Node ${from} gave an unexpected answer (${reply.type}) instead of a certificate`)
    try {
      verifyCertificate(reply.certData, { ptnID, nodeID: this.#identity.nodeID, now: this.#now() })
    } catch (err) {
      if (!(err instanceof InvalidCertificateError)) throw err
      // The admin's fault, not the caller's request: the step could not be completed with that node.
      throw new UnavailableError(`Node ${from} answered with a certificate this node cannot accept: ${err.message}`)
    }
    return reply.certData
  }

  /** The CA key an admin sent with its answer, checked to be the key of `ptnID`. */
  caFromAdmin (keyHex: string, from: string, ptnID: string): NodeIdentity {
    try {
      return caFromHex(keyHex, ptnID)
    } catch (err) {
      if (!(err instanceof CaKeyMismatchError)) throw err
      throw new UnavailableError(`Node ${from} sent a CA key that is not the key of PTN ${ptnID}`)
    }
  }
}
