import type { Logger } from 'pino'
import { ConflictError, PermissionError, UnavailableError } from '../errors.ts'
import type { NodeIdentity } from '../identity/index.ts'
import type { CaKeyStore } from './ca-keys.ts'
import { checkCertificate, verifyCertificate, type PtnRole } from './certificates.ts'
import { InvalidInviteError } from './errors.ts'
import { verifyInvite } from './invites.ts'
import { inEffect, type MembershipStore } from './membership-store.ts'
import type { PtnAsker } from './ptn-asker.ts'
import type { PtnAuthority } from './ptn-authority.ts'
import type { PtnReply } from './protocol.ts'

export interface PtnMemberDeps {
  identity: NodeIdentity
  store: MembershipStore
  keys: CaKeyStore
  /** Re-signs this node's own certificate when it holds the CA key. */
  authority: PtnAuthority
  /** Reaches the admins that redeem invites, hear of leaving and re-issue certificates. */
  asker: PtnAsker
  log: Logger
}

export interface PtnMemberOptions {
  /** The clock certificates and invites this node receives are judged by, in epoch milliseconds. @default Date.now */
  now?: () => number
}

type Joined = { ptnID: string, name: string, role: PtnRole, status: 'active' }

/**
 * This node's own steps as a member: joining with a certificate or through an invite (asking the inviting admin),
 * leaving (telling the admins it knows of) and recovering a membership (with the CA key, or by asking an admin).
 */
export class PtnMember {
  readonly #identity: NodeIdentity
  readonly #store: MembershipStore
  readonly #keys: CaKeyStore
  readonly #authority: PtnAuthority
  readonly #asker: PtnAsker
  readonly #log: Logger
  readonly #now: () => number

  constructor (deps: PtnMemberDeps, options: PtnMemberOptions = {}) {
    this.#identity = deps.identity
    this.#store = deps.store
    this.#keys = deps.keys
    this.#authority = deps.authority
    this.#asker = deps.asker
    this.#log = deps.log
    this.#now = options.now ?? (() => Date.now())
  }

  /** Joins with a certificate an admin issued for this node: the role is the certificate's. */
  joinWithCertificate (certData: string): Joined {
    const cert = verifyCertificate(certData, { nodeID: this.#identity.nodeID, now: this.#now() })
    this.#store.becomeMember(certData, 'active')
    this.#log.info({ ptnID: cert.ptnID, role: cert.role }, 'joined PTN with a certificate')
    return { ptnID: cert.ptnID, name: cert.ptnName, role: cert.role, status: 'active' }
  }

  /**
   * Joins through an invite code: asks the inviting admin over the peer network, which checks the code, records it
   * as used, and answers with a certificate for this node (the connection's remote peer, so nobody can redeem an
   * invite for another node).
   */
  async join (inviteCode: string, options: { signal?: AbortSignal } = {}): Promise<Joined> {
    const invite = verifyInvite(inviteCode, { now: this.#now() })
    this.#store.refuseIfInEffect(invite.ptnID)
    this.#store.refuseIfFull()   // before the admin spends the single-use invite on a membership this node cannot hold
    if (invite.adminNodeID === this.#identity.nodeID) throw new ConflictError(`Invite code of PTN ${invite.ptnID} was made by this node; another node redeems it`)
    const reply = await this.#asker.ask(invite.adminNodeID, { type: 'join-request', ptnID: invite.ptnID, inviteCode }, options)
    if (reply.type === 'refused') {
      if (reply.reason === 'invite_used') throw new InvalidInviteError(`Invite code was already used: ${reply.message}`, 'used')
      if (reply.reason === 'invite_invalid') throw new InvalidInviteError(`Admin ${invite.adminNodeID} refused the invite code: ${reply.message}`, 'refused')
      throw new InvalidInviteError(`Invite code can no longer be redeemed: ${reply.message}`, 'void')
    }
    const certData = this.#asker.certificateFrom(reply, invite.adminNodeID, invite.ptnID)
    const cert = verifyCertificate(certData, { ptnID: invite.ptnID, nodeID: this.#identity.nodeID, now: this.#now() })
    this.#store.becomeMember(certData, 'active')
    this.#log.info({ ptnID: cert.ptnID, admin: invite.adminNodeID }, 'joined PTN through an invite')
    return { ptnID: cert.ptnID, name: cert.ptnName, role: cert.role, status: 'active' }
  }

  /**
   * Leaves a PTN: deletes this node's certificate (and CA key, if it holds one), then tells the admins it knows of
   * that are reachable. An admin holding the only known copy of the CA key must pass `force`, since leaving destroys
   * the PTN's authority. Leaving a PTN already left answers the same and changes nothing.
   */
  async leave (ptnID: string, options: { force?: boolean, signal?: AbortSignal } = {}): Promise<{ status: 'left', ptnID: string }> {
    const row = this.#store.require(ptnID)
    if (!inEffect(row)) return { status: 'left', ptnID }
    const holdsKey = this.#keys.has(ptnID)
    if (holdsKey && this.#store.otherAdmins(ptnID).length === 0 && options.force !== true) {
      throw new ConflictError(`This node holds the only known copy of the CA key of PTN ${ptnID}; leaving deletes it and no one could issue certificates again. Send force: true to leave anyway`)
    }
    const admins = this.#asker.reachableAdmins(ptnID)
    this.#store.markLeft(ptnID, row.role)
    // The key goes only once leaving is committed: a crash in between leaves a key on disk, never a member without it.
    if (holdsKey) this.#keys.remove(ptnID)
    this.#log.info({ ptnID, notifying: admins.length }, 'left PTN')
    // Best effort: an admin that is offline now learns nothing, and counts this node until told otherwise.
    await Promise.all(admins.map(async admin => {
      try {
        await this.#asker.ask(admin, { type: 'leave-notice', ptnID }, options)
      } catch (err) {
        if (!(err instanceof UnavailableError)) throw err
        this.#log.warn({ ptnID, admin, reason: err.message }, 'could not tell an admin that this node left')
      }
    }))
    return { status: 'left', ptnID }
  }

  /**
   * Re-establishes a membership from what survives. A node holding the CA key re-signs its own certificate (as an
   * admin); any other asks the admins it knows of, reachable ones in turn, for a fresh certificate.
   */
  async recover (ptnID: string, options: { signal?: AbortSignal } = {}): Promise<{ status: 'recovered', ptnID: string }> {
    const row = this.#store.require(ptnID)
    if (!inEffect(row)) this.#store.refuseIfFull()
    const ca = this.#keys.load(ptnID)
    if (ca != null) {
      this.#store.becomeMember(this.#authority.issue(ca, row.name, this.#identity.nodeID, 'admin'), 'recovered')
      this.#log.info({ ptnID }, 'PTN membership recovered with the CA key')
      return { status: 'recovered', ptnID }
    }
    const issuer = row.cert_data == null ? null : checkCertificate(row.cert_data, { ptnID, allowExpired: true, now: this.#now() })?.issuerNodeID
    const reachable = this.#asker.reachableAdmins(ptnID, issuer == null ? [] : [issuer])
    if (reachable.length === 0) throw new UnavailableError(`No admin of PTN ${ptnID} is reachable`)
    const refusals: string[] = []
    let lastFailure: UnavailableError | null = null
    for (const admin of reachable) {
      let reply: PtnReply
      try {
        reply = await this.#asker.ask(admin, { type: 'recover-request', ptnID, certData: row.cert_data }, options)
      } catch (err) {
        if (!(err instanceof UnavailableError)) throw err
        lastFailure = err
        continue
      }
      if (reply.type === 'refused') {
        refusals.push(`${admin}: ${reply.message}`)
        continue
      }
      const certData = this.#asker.certificateFrom(reply, admin, ptnID)
      if (reply.type === 'cert' && reply.caKeyHex != null) this.#keys.save(this.#asker.caFromAdmin(reply.caKeyHex, admin, ptnID))
      this.#store.becomeMember(certData, 'recovered')
      this.#log.info({ ptnID, admin }, 'PTN membership recovered through an admin')
      return { status: 'recovered', ptnID }
    }
    if (refusals.length > 0) throw new PermissionError(`No admin of PTN ${ptnID} would re-issue this node's certificate (${refusals.join('; ')})`)
    throw lastFailure ?? new UnavailableError(`No admin of PTN ${ptnID} answered`)
  }
}
