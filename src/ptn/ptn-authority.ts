import type { Logger } from 'pino'
import { ConflictError, NotFoundError, PermissionError, UnavailableError } from '../errors.ts'
import { generateSeed, identityFromSeed, type NodeIdentity } from '../identity/index.ts'
import { caFromHex, caKeyHex, type CaKeyStore } from './ca-keys.ts'
import { DEFAULT_CERTIFICATE_TTL_MS, issueCertificate, type PtnRole } from './certificates.ts'
import { INVITE_TTL_MS, createInvite } from './invites.ts'
import { inEffect, type MembershipRow, type MembershipStore } from './membership-store.ts'
import type { PtnAsker } from './ptn-asker.ts'

export interface PtnAuthorityDeps {
  identity: NodeIdentity
  store: MembershipStore
  keys: CaKeyStore
  /** Reaches the member a promotion goes to. */
  asker: PtnAsker
  log: Logger
}

export interface PtnAuthorityOptions {
  /** Validity of the certificates this node issues. @default 365 days */
  certificateTtlMs?: number
  /** Validity of the invite codes this node makes. @default 1 hour */
  inviteTtlMs?: number
  /** The clock certificates and invites are issued by, in epoch milliseconds. @default Date.now */
  now?: () => number
}

/** A PTN this node administers, with its CA. */
export interface Authority {
  row: MembershipRow
  ca: NodeIdentity
}

/**
 * The CA side of a PTN: creating one, the invites and certificates its admins sign, making a member an admin, and
 * taking the CA key in. An admin is one because it holds the CA key (`CaKeyStore`); every step here that signs
 * needs both the admin membership and the key.
 */
export class PtnAuthority {
  readonly #identity: NodeIdentity
  readonly #store: MembershipStore
  readonly #keys: CaKeyStore
  readonly #asker: PtnAsker
  readonly #log: Logger
  readonly #certificateTtlMs: number
  readonly #inviteTtlMs: number
  readonly #now: () => number

  constructor (deps: PtnAuthorityDeps, options: PtnAuthorityOptions = {}) {
    this.#identity = deps.identity
    this.#store = deps.store
    this.#keys = deps.keys
    this.#asker = deps.asker
    this.#log = deps.log
    this.#certificateTtlMs = options.certificateTtlMs ?? DEFAULT_CERTIFICATE_TTL_MS
    this.#inviteTtlMs = options.inviteTtlMs ?? INVITE_TTL_MS
    this.#now = options.now ?? (() => Date.now())
  }

  /** Creates a PTN with a new CA key; this node is its first admin and CA. */
  create (name: string): { ptnID: string, name: string, role: 'admin' } {
    this.#store.refuseIfFull()
    const ca = identityFromSeed(generateSeed())
    const certData = this.issue(ca, name, this.#identity.nodeID, 'admin')
    // The key is written first: a crash between the two leaves an unused key file, never a PTN nobody can administer.
    this.#keys.save(ca)
    this.#store.addCreated(ca.nodeID, name, certData)
    this.#log.info({ ptnID: ca.nodeID, name }, 'PTN created')
    return { ptnID: ca.nodeID, name, role: 'admin' }
  }

  /** A signed, single-use invite code, valid for an hour, redeemable at this node (an admin). */
  invite (ptnID: string): { inviteCode: string } {
    const { row, ca } = this.requireAdmin(ptnID)
    return { inviteCode: createInvite(ca, { ptnName: row.name, adminNodeID: this.#identity.nodeID, now: this.#now(), ttlMs: this.#inviteTtlMs }) }
  }

  /** Signs a certificate for `nodeID` (the role defaults to `provider`); that node joins with it. */
  issueCertificate (ptnID: string, nodeID: string, role: PtnRole = 'provider'): { certData: string, nodeID: string, role: PtnRole } {
    const { row, ca } = this.requireAdmin(ptnID)
    const certData = this.issue(ca, row.name, nodeID, role)
    if (nodeID !== this.#identity.nodeID) this.#store.noteMember(ptnID, nodeID, role)
    return { certData, nodeID, role }
  }

  /**
   * Makes a member an admin: signs its admin certificate and hands it, with the CA key, to that node over the
   * encrypted peer stream. The target must be a member this node knows of (404) and reachable (503).
   */
  async promoteAdmin (ptnID: string, nodeID: string, options: { signal?: AbortSignal } = {}): Promise<{ nodeID: string, role: 'admin' }> {
    const { row, ca } = this.requireAdmin(ptnID)
    if (nodeID === this.#identity.nodeID) throw new ConflictError(`This node is already an admin of PTN ${ptnID}`)
    if (!this.#asker.isKnownMember(ptnID, nodeID)) throw new NotFoundError(`Node ${nodeID} is not a member of PTN ${ptnID}`)
    const certData = this.issue(ca, row.name, nodeID, 'admin')
    const reply = await this.#asker.ask(nodeID, { type: 'promote', ptnID, certData, caKeyHex: caKeyHex(ca) }, options)
    if (reply.type === 'refused') {
      if (reply.reason === 'not_member') throw new NotFoundError(`Node ${nodeID} is not a member of PTN ${ptnID}: ${reply.message}`)
      throw new ConflictError(`Node ${nodeID} refused to become an admin of PTN ${ptnID}: ${reply.message}`)
    }
    if (reply.type !== 'ok') throw new UnavailableError(`Node ${nodeID} gave an unexpected answer (${reply.type}) to promote-admin`)
    this.#store.noteMember(ptnID, nodeID, 'admin')
    this.#log.info({ ptnID, nodeID }, 'member promoted to admin')
    return { nodeID, role: 'admin' }
  }

  /**
   * Restores or transfers CA authority: stores the key (it must be the key of `ptnID`) and, while the membership is
   * in effect, re-signs this node's certificate as an admin. A node that has left stays left; `recover` then
   * re-establishes the membership with the key.
   */
  importCaKey (ptnID: string, keyHex: string): { status: 'imported', ptnID: string } {
    const row = this.#store.require(ptnID)
    const ca = caFromHex(keyHex, ptnID)
    this.#keys.save(ca)
    if (inEffect(row)) this.#store.becomeAdmin(ptnID, row.status, this.issue(ca, row.name, this.#identity.nodeID, 'admin'))
    this.#log.info({ ptnID }, 'CA key imported')
    return { status: 'imported', ptnID }
  }

  /** Signs a certificate of `ptnName` for `nodeID` with `ca`, valid for the certificate TTL from now. */
  issue (ca: NodeIdentity, ptnName: string, nodeID: string, role: PtnRole): string {
    return issueCertificate(ca, { ptnName, nodeID, role, issuerNodeID: this.#identity.nodeID, now: this.#now(), ttlMs: this.#certificateTtlMs })
  }

  /** The membership and CA of a PTN this node administers; 404, 403 or 409 (key missing) otherwise. */
  requireAdmin (ptnID: string): Authority {
    const row = this.#store.require(ptnID)
    if (!inEffect(row) || row.role !== 'admin') throw new PermissionError(`This node is not an admin of PTN ${ptnID}`)
    const ca = this.#keys.load(ptnID)
    if (ca == null) throw new ConflictError(`This node is an admin of PTN ${ptnID} but does not hold its CA key; import it with import-ca-key`)
    return { row, ca }
  }

  /** Like `requireAdmin` for the protocol side: null instead of an error. */
  adminAuthority (ptnID: string): Authority | null {
    const row = this.#store.get(ptnID)
    if (!inEffect(row) || row.role !== 'admin') return null
    const ca = this.#keys.load(ptnID)
    return ca == null ? null : { row, ca }
  }
}
