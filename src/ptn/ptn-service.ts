import type { Logger } from 'pino'
import type { NodeIdentity } from '../identity/index.ts'
import type { Database } from '../store/index.ts'
import { CaKeyStore } from './ca-keys.ts'
import type { PtnRole } from './certificates.ts'
import { MembershipStore, type MembershipRecord } from './membership-store.ts'
import { MAX_PTN_MEMBERSHIPS, certificatesByUse } from './memberships.ts'
import type { PtnPeers } from './protocol.ts'
import { PtnAsker } from './ptn-asker.ts'
import { PtnAuthority } from './ptn-authority.ts'
import { PtnMember } from './ptn-member.ts'
import { PtnResponder } from './ptn-responder.ts'
import { VerifiedCertificates } from './verified-certificates.ts'

export interface PtnServiceDeps {
  db: Database
  identity: NodeIdentity
  /** The peer network; null when it is not running, and then every step that needs another node answers 503. */
  peers: PtnPeers | null
  log: Logger
}

export interface PtnServiceOptions {
  /** Directory of the CA key files, `<dataDir>/ptn`. */
  dir: string
  /** Validity of the certificates this node issues. @default 365 days */
  certificateTtlMs?: number
  /** Validity of the invite codes this node makes. @default 1 hour */
  inviteTtlMs?: number
  /** Deadline of one exchange with another node. @default 10_000 */
  requestTimeoutMs?: number
  /** The clock certificates and invites are issued and judged by, in epoch milliseconds; every part shares it, so a
   *  test can move time past an expiry instead of waiting for it. @default Date.now */
  now?: () => number
}

/**
 * Private trusted networks (PTNs), as the rest of the node sees them: this node's memberships, the CA keys it holds,
 * the members it knows of, the invites it has redeemed, and the PTN protocol through which admins and members reach
 * each other. It composes the domain's parts, each with one job: the tables (`MembershipStore`), the CA
 * (`PtnAuthority`), this node's steps as a member (`PtnMember`), the asking and answering sides of the protocol
 * (`PtnAsker`, `PtnResponder`), and the check of the certificates peers present (`VerifiedCertificates`).
 */
export class PtnService {
  readonly #store: MembershipStore
  readonly #certificates: VerifiedCertificates
  readonly #asker: PtnAsker
  readonly #authority: PtnAuthority
  readonly #member: PtnMember
  readonly #responder: PtnResponder
  readonly #membershipListeners = new Set<() => void>()

  constructor (deps: PtnServiceDeps, options: PtnServiceOptions) {
    const { db, identity, peers, log } = deps
    const { now } = options
    const keys = new CaKeyStore({ dir: options.dir })
    this.#store = new MembershipStore({ db, nodeID: identity.nodeID }, { now, changed: () => { for (const listener of this.#membershipListeners) listener() } })
    this.#certificates = new VerifiedCertificates({ now })
    this.#asker = new PtnAsker({ identity, peers, store: this.#store, certificates: this.#certificates }, { requestTimeoutMs: options.requestTimeoutMs, now })
    this.#authority = new PtnAuthority({ identity, store: this.#store, keys, asker: this.#asker, log },
      { certificateTtlMs: options.certificateTtlMs, inviteTtlMs: options.inviteTtlMs, now })
    this.#member = new PtnMember({ identity, store: this.#store, keys, authority: this.#authority, asker: this.#asker, log }, { now })
    this.#responder = new PtnResponder({ identity, peers, store: this.#store, keys, authority: this.#authority, log }, { now })
  }

  /** Registers the PTN protocol on the peer network, so admins and members can reach this node. */
  async start (): Promise<void> {
    await this.#responder.start()
  }

  /** Every membership, with its status (`active`, `left` or `recovered`), oldest first. */
  list (): MembershipRecord[] {
    return this.#store.list()
  }

  /** Memberships in effect (`active` or `recovered`): the count the app snapshot shows. */
  countInEffect (): number {
    return this.#store.countInEffect()
  }

  /** Creates a PTN with a new CA key; this node is its first admin and CA. */
  create (name: string): { ptnID: string, name: string, role: 'admin' } {
    return this.#authority.create(name)
  }

  /** A signed, single-use invite code, valid for an hour, redeemable at this node (an admin). */
  invite (ptnID: string): { inviteCode: string } {
    return this.#authority.invite(ptnID)
  }

  /** Signs a certificate for `nodeID` (the role defaults to `provider`); that node joins with it. */
  issueCertificate (ptnID: string, nodeID: string, role: PtnRole = 'provider'): { certData: string, nodeID: string, role: PtnRole } {
    return this.#authority.issueCertificate(ptnID, nodeID, role)
  }

  /** Joins with a certificate an admin issued for this node: the role is the certificate's. */
  joinWithCertificate (certData: string): { ptnID: string, name: string, role: PtnRole, status: 'active' } {
    return this.#member.joinWithCertificate(certData)
  }

  /** Joins through an invite code, asking the inviting admin over the peer network (`PtnMember.join`). */
  async join (inviteCode: string, options: { signal?: AbortSignal } = {}): Promise<{ ptnID: string, name: string, role: PtnRole, status: 'active' }> {
    return await this.#member.join(inviteCode, options)
  }

  /** Makes a member an admin, handing it the CA key over the encrypted peer stream (`PtnAuthority.promoteAdmin`). */
  async promoteAdmin (ptnID: string, nodeID: string, options: { signal?: AbortSignal } = {}): Promise<{ nodeID: string, role: 'admin' }> {
    return await this.#authority.promoteAdmin(ptnID, nodeID, options)
  }

  /** Restores or transfers CA authority (`PtnAuthority.importCaKey`). */
  importCaKey (ptnID: string, keyHex: string): { status: 'imported', ptnID: string } {
    return this.#authority.importCaKey(ptnID, keyHex)
  }

  /** Leaves a PTN and tells the admins it knows of (`PtnMember.leave`); the last CA holder must pass `force`. */
  async leave (ptnID: string, options: { force?: boolean, signal?: AbortSignal } = {}): Promise<{ status: 'left', ptnID: string }> {
    return await this.#member.leave(ptnID, options)
  }

  /** Re-establishes a membership from what survives, with the CA key or through an admin (`PtnMember.recover`). */
  async recover (ptnID: string, options: { signal?: AbortSignal } = {}): Promise<{ status: 'recovered', ptnID: string }> {
    return await this.#member.recover(ptnID, options)
  }

  /**
   * Calls `listener` after each change of this node's memberships (created, joined, promoted, left, recovered): what
   * `certificatesForAdvert` and `memberPtnIDs` read. A certificate expiring is no change here: they judge expiry when
   * read. Returns the function that stops it; listeners must not throw.
   */
  onMembershipChange (listener: () => void): () => void {
    this.#membershipListeners.add(listener)
    return () => { this.#membershipListeners.delete(listener) }
  }

  /**
   * The certificates of the memberships in effect, valid now, that this node presents to peers in a record of at
   * most `limit` (`certificatesByUse`: all of them when they fit, else the most needed). @default every one
   */
  certificatesForAdvert (limit = MAX_PTN_MEMBERSHIPS): string[] {
    return certificatesByUse(this.#store.validOwnCertificates(), this.#asker.peers(), limit)
  }

  /** The PTNs this node is a member of, with a valid certificate: whose members may use its reserved slots. */
  memberPtnIDs (): string[] {
    return this.#store.validOwnCertificates().map(({ ptnID }) => ptnID)
  }

  /**
   * Checks a certificate a peer presents: signed by the CA of its PTN (checked against the ptnID itself), not
   * expired, issued to `nodeID`, and of `ptnID` if given. An expired or forged certificate counts for nothing: null.
   */
  verifyMemberCertificate (certData: string, nodeID: string, ptnID?: string): { ptnID: string, role: PtnRole } | null {
    const cert = this.#certificates.check(certData, { nodeID, ptnID })
    return cert == null ? null : { ptnID: cert.ptnID, role: cert.role }
  }

  /**
   * The PTNs a peer's advertised certificates prove it a member of (each verified as `verifyMemberCertificate` does);
   * the peer network's `verifyPtnCertificates` provider. A record's list is verified once, when first asked about, and
   * only its expiry is judged again at each call (`VerifiedCertificates.provenPtnIDs`): the peer network asks about
   * every peer each time it lists them.
   */
  verifiedPtnIDs (nodeID: string, certificates: readonly string[]): string[] {
    return this.#certificates.provenPtnIDs(nodeID, certificates)
  }
}
