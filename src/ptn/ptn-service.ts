// Over 400 lines for a reason: one service owns the three PTN tables and both sides of the PTN protocol, whose steps
// share their checks; the documents, CA keys, invites, wire format and membership limits live in their own files.
import type { StatementSync } from 'node:sqlite'
import type { Logger } from 'pino'
import { ConflictError, NotFoundError, PermissionError, UnavailableError } from '../errors.ts'
import { generateSeed, identityFromSeed, type NodeIdentity } from '../identity/index.ts'
import { inTransaction, type Database } from '../store/index.ts'
import { CaKeyStore, caFromHex, caKeyHex } from './ca-keys.ts'
import { DEFAULT_CERTIFICATE_TTL_MS, checkCertificate, issueCertificate, verifyCertificate, type PtnRole } from './certificates.ts'
import { CaKeyMismatchError, InvalidCertificateError, InvalidInviteError } from './errors.ts'
import { INVITE_TTL_MS, createInvite, verifyInvite } from './invites.ts'
import { MAX_PTN_MEMBERSHIPS, certificatesByUse } from './memberships.ts'
import { MAX_INBOUND_PTN_STREAMS, PTN_PROTOCOL, askPtnPeer, servePtnStream, type PtnPeers, type PtnReply, type PtnRequest } from './protocol.ts'

/** `active` after create or join, `left` after leave, `recovered` after recover. */
export type MembershipStatus = 'active' | 'left' | 'recovered'

/** One membership as `GET /v1/app/ptn` lists it. */
export interface MembershipRecord {
  ptnID: string
  name: string
  role: PtnRole
  /** Members of the PTN this node knows of (itself included while it is in), as active. */
  members: number
  status: MembershipStatus
}

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
}

interface MembershipRow {
  ptn_id: string
  name: string
  role: PtnRole
  status: MembershipStatus
  cert_data: string | null
}

interface MemberRow {
  node_id: string
  role: PtnRole
  status: 'active' | 'left'
}

/** Statuses in which the membership is in effect: the node holds a certificate and takes part. */
function inEffect (row: MembershipRow | undefined): row is MembershipRow {
  return row != null && row.status !== 'left'
}

/**
 * Private trusted networks (PTNs): this node's memberships, the CA keys it holds,
 * the members it knows of, the invites it has redeemed, and the PTN protocol through which admins and members reach
 * each other. It owns the tables `ptn_memberships`, `ptn_members` and `ptn_used_invites`.
 *
 * Who knows what: a membership row is this node's own status in a PTN with its certificate. `ptn_members` is this
 * node's view of the others: the nodes it issued certificates to, the admin that issued its own, the nodes it
 * promoted or was promoted by, and the leave notices it received. `members` counts that view.
 */
export class PtnService {
  readonly #db: Database
  readonly #identity: NodeIdentity
  readonly #peers: PtnPeers | null
  readonly #log: Logger
  readonly #keys: CaKeyStore
  readonly #certificateTtlMs: number
  readonly #inviteTtlMs: number
  readonly #requestTimeoutMs: number

  readonly #selectMemberships: StatementSync
  readonly #selectMembership: StatementSync
  readonly #upsertMembership: StatementSync
  readonly #updateMembership: StatementSync
  readonly #countActiveMembers: StatementSync
  readonly #countMemberships: StatementSync
  readonly #selectMember: StatementSync
  readonly #selectAdmins: StatementSync
  readonly #upsertMember: StatementSync
  readonly #markMemberLeft: StatementSync
  readonly #selectUsedInvite: StatementSync
  readonly #insertUsedInvite: StatementSync

  constructor (deps: PtnServiceDeps, options: PtnServiceOptions) {
    this.#db = deps.db
    this.#identity = deps.identity
    this.#peers = deps.peers
    this.#log = deps.log
    this.#keys = new CaKeyStore({ dir: options.dir })
    this.#certificateTtlMs = options.certificateTtlMs ?? DEFAULT_CERTIFICATE_TTL_MS
    this.#inviteTtlMs = options.inviteTtlMs ?? INVITE_TTL_MS
    this.#requestTimeoutMs = options.requestTimeoutMs ?? 10_000

    const db = deps.db
    const columns = 'ptn_id, name, role, status, cert_data'
    this.#selectMemberships = db.prepare(`SELECT ${columns} FROM ptn_memberships ORDER BY joined_at, rowid`)
    this.#selectMembership = db.prepare(`SELECT ${columns} FROM ptn_memberships WHERE ptn_id = ?`)
    this.#upsertMembership = db.prepare(`INSERT INTO ptn_memberships (ptn_id, name, role, status, cert_data, joined_at, updated_at)
      VALUES (:ptn, :name, :role, :status, :cert, :now, :now)
      ON CONFLICT (ptn_id) DO UPDATE SET name = :name, role = :role, status = :status, cert_data = :cert, updated_at = :now,
        joined_at = CASE WHEN :status = 'active' THEN :now ELSE joined_at END`)
    this.#updateMembership = db.prepare(`UPDATE ptn_memberships SET role = :role, status = :status, cert_data = :cert, updated_at = :now
      WHERE ptn_id = :ptn`)
    this.#countMemberships = db.prepare("SELECT count(*) AS n FROM ptn_memberships WHERE status != 'left'")
    this.#countActiveMembers = db.prepare("SELECT count(*) AS n FROM ptn_members WHERE ptn_id = ? AND status = 'active'")
    this.#selectMember = db.prepare('SELECT node_id, role, status FROM ptn_members WHERE ptn_id = ? AND node_id = ?')
    this.#selectAdmins = db.prepare("SELECT node_id, role, status FROM ptn_members WHERE ptn_id = ? AND role = 'admin' AND status = 'active' AND node_id != ? ORDER BY updated_at DESC")
    this.#upsertMember = db.prepare(`INSERT INTO ptn_members (ptn_id, node_id, role, status, updated_at) VALUES (:ptn, :node, :role, 'active', :now)
      ON CONFLICT (ptn_id, node_id) DO UPDATE SET role = :role, status = 'active', updated_at = :now`)
    this.#markMemberLeft = db.prepare("UPDATE ptn_members SET status = 'left', updated_at = ? WHERE ptn_id = ? AND node_id = ?")
    this.#selectUsedInvite = db.prepare('SELECT nonce FROM ptn_used_invites WHERE nonce = ?')
    this.#insertUsedInvite = db.prepare('INSERT INTO ptn_used_invites (nonce, ptn_id, node_id, used_at) VALUES (?, ?, ?, ?)')
  }

  /** Registers the PTN protocol on the peer network, so admins and members can reach this node. */
  async start (): Promise<void> {
    if (this.#peers == null) return
    await this.#peers.handle(PTN_PROTOCOL, async (stream, peer) => {
      await servePtnStream(stream, peer.nodeID, { identity: this.#identity, log: this.#log, answer: (request, from) => this.#answer(request, from) })
    }, { maxInboundStreams: MAX_INBOUND_PTN_STREAMS })
  }

  /** Every membership, with its status (`active`, `left` or `recovered`), oldest first. */
  list (): MembershipRecord[] {
    return (this.#selectMemberships.all() as unknown as MembershipRow[]).map(row => this.#record(row))
  }

  /** Memberships in effect (`active` or `recovered`): the count the app snapshot shows. */
  countInEffect (): number {
    return (this.#countMemberships.get() as { n: number }).n
  }

  /** Creates a PTN with a new CA key; this node is its first admin and CA. */
  create (name: string): { ptnID: string, name: string, role: 'admin' } {
    this.#refuseIfFull()
    const ca = identityFromSeed(generateSeed())
    const certData = this.#issue(ca, name, this.#identity.nodeID, 'admin')
    // The key is written first: a crash between the two leaves an unused key file, never a PTN nobody can administer.
    this.#keys.save(ca)
    inTransaction(this.#db, () => {
      this.#refuseIfFull()
      this.#upsertMembership.run({ ptn: ca.nodeID, name, role: 'admin', status: 'active', cert: certData, now: nowIso() })
      this.#noteMember(ca.nodeID, this.#identity.nodeID, 'admin')
    })
    this.#log.info({ ptnID: ca.nodeID, name }, 'PTN created')
    return { ptnID: ca.nodeID, name, role: 'admin' }
  }

  /** A signed, single-use invite code, valid for an hour, redeemable at this node (an admin). */
  invite (ptnID: string): { inviteCode: string } {
    const { row, ca } = this.#requireAdmin(ptnID)
    return { inviteCode: createInvite(ca, { ptnName: row.name, adminNodeID: this.#identity.nodeID, ttlMs: this.#inviteTtlMs }) }
  }

  /** Signs a certificate for `nodeID` (the role defaults to `provider`); that node joins with it. */
  issueCertificate (ptnID: string, nodeID: string, role: PtnRole = 'provider'): { certData: string, nodeID: string, role: PtnRole } {
    const { row, ca } = this.#requireAdmin(ptnID)
    const certData = this.#issue(ca, row.name, nodeID, role)
    if (nodeID !== this.#identity.nodeID) this.#noteMember(ptnID, nodeID, role)
    return { certData, nodeID, role }
  }

  /** Joins with a certificate an admin issued for this node: the role is the certificate's. */
  joinWithCertificate (certData: string): { ptnID: string, name: string, role: PtnRole, status: 'active' } {
    const cert = verifyCertificate(certData, { nodeID: this.#identity.nodeID })
    this.#becomeMember(certData, 'active')
    this.#log.info({ ptnID: cert.ptnID, role: cert.role }, 'joined PTN with a certificate')
    return { ptnID: cert.ptnID, name: cert.ptnName, role: cert.role, status: 'active' }
  }

  /**
   * Joins through an invite code: asks the inviting admin over the peer network, which checks the code, records it
   * as used, and answers with a certificate for this node (the connection's remote peer, so nobody can redeem an
   * invite for another node).
   */
  async join (inviteCode: string, options: { signal?: AbortSignal } = {}): Promise<{ ptnID: string, name: string, role: PtnRole, status: 'active' }> {
    const invite = verifyInvite(inviteCode)
    this.#refuseIfInEffect(invite.ptnID)
    this.#refuseIfFull()   // before the admin spends the single-use invite on a membership this node cannot hold
    if (invite.adminNodeID === this.#identity.nodeID) throw new ConflictError(`Invite code of PTN ${invite.ptnID} was made by this node; another node redeems it`)
    const reply = await this.#ask(invite.adminNodeID, { type: 'join-request', ptnID: invite.ptnID, inviteCode }, options)
    if (reply.type === 'refused') {
      if (reply.reason === 'invite_used') throw new InvalidInviteError(`Invite code was already used: ${reply.message}`, 'used')
      if (reply.reason === 'invite_invalid') throw new InvalidInviteError(`Admin ${invite.adminNodeID} refused the invite code: ${reply.message}`, 'refused')
      throw new InvalidInviteError(`Invite code can no longer be redeemed: ${reply.message}`, 'void')
    }
    const certData = this.#certificateFrom(reply, invite.adminNodeID, invite.ptnID)
    const cert = verifyCertificate(certData, { ptnID: invite.ptnID, nodeID: this.#identity.nodeID })
    this.#becomeMember(certData, 'active')
    this.#log.info({ ptnID: cert.ptnID, admin: invite.adminNodeID }, 'joined PTN through an invite')
    return { ptnID: cert.ptnID, name: cert.ptnName, role: cert.role, status: 'active' }
  }

  /**
   * Makes a member an admin: signs its admin certificate and hands it, with the CA key, to that node over the
   * encrypted peer stream. The target must be a member this node knows of (404) and reachable (503).
   */
  async promoteAdmin (ptnID: string, nodeID: string, options: { signal?: AbortSignal } = {}): Promise<{ nodeID: string, role: 'admin' }> {
    const { row, ca } = this.#requireAdmin(ptnID)
    if (nodeID === this.#identity.nodeID) throw new ConflictError(`This node is already an admin of PTN ${ptnID}`)
    if (!this.#isKnownMember(ptnID, nodeID)) throw new NotFoundError(`Node ${nodeID} is not a member of PTN ${ptnID}`)
    const certData = this.#issue(ca, row.name, nodeID, 'admin')
    const reply = await this.#ask(nodeID, { type: 'promote', ptnID, certData, caKeyHex: caKeyHex(ca) }, options)
    if (reply.type === 'refused') {
      if (reply.reason === 'not_member') throw new NotFoundError(`Node ${nodeID} is not a member of PTN ${ptnID}: ${reply.message}`)
      throw new ConflictError(`Node ${nodeID} refused to become an admin of PTN ${ptnID}: ${reply.message}`)
    }
    if (reply.type !== 'ok') throw new UnavailableError(`Node ${nodeID} gave an unexpected answer (${reply.type}) to promote-admin`)
    this.#noteMember(ptnID, nodeID, 'admin')
    this.#log.info({ ptnID, nodeID }, 'member promoted to admin')
    return { nodeID, role: 'admin' }
  }

  /**
   * Restores or transfers CA authority: stores the key (it must be the key of `ptnID`) and, while the membership is
   * in effect, re-signs this node's certificate as an admin. A node that has left stays left; `recover` then
   * re-establishes the membership with the key.
   */
  importCaKey (ptnID: string, keyHex: string): { status: 'imported', ptnID: string } {
    const row = this.#requireMembership(ptnID)
    const ca = caFromHex(keyHex, ptnID)
    this.#keys.save(ca)
    if (inEffect(row)) {
      const certData = this.#issue(ca, row.name, this.#identity.nodeID, 'admin')
      inTransaction(this.#db, () => {
        this.#updateMembership.run({ ptn: ptnID, role: 'admin', status: row.status, cert: certData, now: nowIso() })
        this.#noteMember(ptnID, this.#identity.nodeID, 'admin')
      })
    }
    this.#log.info({ ptnID }, 'CA key imported')
    return { status: 'imported', ptnID }
  }

  /**
   * Leaves a PTN: deletes this node's certificate (and CA key, if it holds one), then tells the admins it knows of
   * that are reachable. An admin holding the only known copy of the CA key must pass `force`, since leaving destroys
   * the PTN's authority. Leaving a PTN already left answers the same and changes nothing.
   */
  async leave (ptnID: string, options: { force?: boolean, signal?: AbortSignal } = {}): Promise<{ status: 'left', ptnID: string }> {
    const row = this.#requireMembership(ptnID)
    if (!inEffect(row)) return { status: 'left', ptnID }
    const holdsKey = this.#keys.has(ptnID)
    if (holdsKey && this.#otherAdmins(ptnID).length === 0 && options.force !== true) {
      throw new ConflictError(`This node holds the only known copy of the CA key of PTN ${ptnID}; leaving deletes it and no one could issue certificates again. Send force: true to leave anyway`)
    }
    const admins = this.#reachableAdmins(ptnID)
    inTransaction(this.#db, () => {
      this.#updateMembership.run({ ptn: ptnID, role: row.role, status: 'left', cert: null, now: nowIso() })
      this.#noteLeft(ptnID, this.#identity.nodeID)
    })
    // The key goes only once leaving is committed: a crash in between leaves a key on disk, never a member without it.
    if (holdsKey) this.#keys.remove(ptnID)
    this.#log.info({ ptnID, notifying: admins.length }, 'left PTN')
    // Best effort: an admin that is offline now learns nothing, and counts this node until told otherwise.
    await Promise.all(admins.map(async admin => {
      try {
        await this.#ask(admin, { type: 'leave-notice', ptnID }, options)
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
    const row = this.#requireMembership(ptnID)
    if (!inEffect(row)) this.#refuseIfFull()
    const ca = this.#keys.load(ptnID)
    if (ca != null) {
      const certData = this.#issue(ca, row.name, this.#identity.nodeID, 'admin')
      this.#becomeMember(certData, 'recovered')
      this.#log.info({ ptnID }, 'PTN membership recovered with the CA key')
      return { status: 'recovered', ptnID }
    }
    const issuer = row.cert_data == null ? null : checkCertificate(row.cert_data, { ptnID, allowExpired: true })?.issuerNodeID
    const reachable = this.#reachableAdmins(ptnID, issuer == null ? [] : [issuer])
    if (reachable.length === 0) throw new UnavailableError(`No admin of PTN ${ptnID} is reachable`)
    const refusals: string[] = []
    let lastFailure: UnavailableError | null = null
    for (const admin of reachable) {
      let reply: PtnReply
      try {
        reply = await this.#ask(admin, { type: 'recover-request', ptnID, certData: row.cert_data }, options)
      } catch (err) {
        if (!(err instanceof UnavailableError)) throw err
        lastFailure = err
        continue
      }
      if (reply.type === 'refused') {
        refusals.push(`${admin}: ${reply.message}`)
        continue
      }
      const certData = this.#certificateFrom(reply, admin, ptnID)
      if (reply.type === 'cert' && reply.caKeyHex != null) this.#keys.save(this.#caFromAdmin(reply.caKeyHex, admin, ptnID))
      this.#becomeMember(certData, 'recovered')
      this.#log.info({ ptnID, admin }, 'PTN membership recovered through an admin')
      return { status: 'recovered', ptnID }
    }
    if (refusals.length > 0) throw new PermissionError(`No admin of PTN ${ptnID} would re-issue this node's certificate (${refusals.join('; ')})`)
    throw lastFailure ?? new UnavailableError(`No admin of PTN ${ptnID} answered`)
  }

  /**
   * The certificates of the memberships in effect, valid now, that this node presents to peers in a record of at
   * most `limit` (`certificatesByUse`: all of them when they fit, else the most needed). @default every one
   */
  certificatesForAdvert (limit = MAX_PTN_MEMBERSHIPS): string[] {
    return certificatesByUse(this.#validOwnCertificates(), this.#peers?.peers() ?? [], limit)
  }

  /** The PTNs this node is a member of, with a valid certificate: whose members may use its reserved slots. */
  memberPtnIDs (): string[] {
    return this.#validOwnCertificates().map(({ ptnID }) => ptnID)
  }

  /**
   * Checks a certificate a peer presents: signed by the CA of its PTN (checked against the ptnID itself), not
   * expired, issued to `nodeID`, and of `ptnID` if given. An expired or forged certificate counts for nothing: null.
   */
  verifyMemberCertificate (certData: string, nodeID: string, ptnID?: string): { ptnID: string, role: PtnRole } | null {
    const cert = checkCertificate(certData, { nodeID, ptnID })
    return cert == null ? null : { ptnID: cert.ptnID, role: cert.role }
  }

  /**
   * The PTNs a peer's advertised certificates prove it a member of (each verified as `verifyMemberCertificate` does);
   * the peer network's `verifyPtnCertificates` provider.
   */
  verifiedPtnIDs (nodeID: string, certificates: readonly string[]): string[] {
    const proven = new Set<string>()
    for (const certData of certificates) {
      const cert = this.verifyMemberCertificate(certData, nodeID)
      if (cert != null) proven.add(cert.ptnID)
    }
    return [...proven]
  }

  // ---- the PTN protocol, the answering side ----

  #answer (request: PtnRequest, from: string): PtnReply {
    switch (request.type) {
      case 'join-request': return this.#redeemInvite(request.ptnID, request.inviteCode, from)
      case 'promote': return this.#acceptPromotion(request.ptnID, request.certData, request.caKeyHex, from)
      case 'leave-notice': return this.#acceptLeaveNotice(request.ptnID, from)
      case 'recover-request': return this.#reissue(request.ptnID, request.certData, from)
    }
  }

  #redeemInvite (ptnID: string, inviteCode: string, from: string): PtnReply {
    let invite
    try {
      invite = verifyInvite(inviteCode)
    } catch (err) {
      if (!(err instanceof InvalidInviteError)) throw err
      return refused('invite_invalid', err.message)
    }
    if (invite.ptnID !== ptnID) return refused('invite_invalid', `Invite code is for PTN ${invite.ptnID}, not ${ptnID}`)
    if (invite.adminNodeID !== this.#identity.nodeID) return refused('invite_invalid', `Invite code is redeemed at node ${invite.adminNodeID}, not here`)
    const authority = this.#adminAuthority(ptnID)
    if (authority == null) return refused('not_admin', `This node is no longer an admin of PTN ${ptnID}`)
    return inTransaction(this.#db, () => {
      // Single use: the nonce is recorded in the same transaction that checks it, so two redemptions cannot both pass.
      if (this.#selectUsedInvite.get(invite.nonce) != null) return refused('invite_used', 'This invite code has already been used')
      this.#insertUsedInvite.run(invite.nonce, ptnID, from, nowIso())
      this.#noteMember(ptnID, from, 'provider')
      return { type: 'cert' as const, certData: this.#issue(authority.ca, authority.row.name, from, 'provider') }
    })
  }

  #acceptPromotion (ptnID: string, certData: string, keyHex: string, from: string): PtnReply {
    const row = this.#selectMembership.get(ptnID) as MembershipRow | undefined
    if (!inEffect(row)) return refused('not_member', `This node is not a member of PTN ${ptnID}`)
    let ca: NodeIdentity
    try {
      ca = caFromHex(keyHex, ptnID)
      const cert = verifyCertificate(certData, { ptnID, nodeID: this.#identity.nodeID })
      if (cert.role !== 'admin') throw new InvalidCertificateError(`Certificate grants role ${cert.role}, not admin`, 'wrong_role')
    } catch (err) {
      if (err instanceof CaKeyMismatchError) return refused('key_mismatch', err.message)
      if (err instanceof InvalidCertificateError) return refused('cert_invalid', err.message)
      throw err
    }
    this.#keys.save(ca)
    inTransaction(this.#db, () => {
      this.#updateMembership.run({ ptn: ptnID, role: 'admin', status: row.status, cert: certData, now: nowIso() })
      this.#noteMember(ptnID, this.#identity.nodeID, 'admin')
      // Only a holder of the CA key could send it: the sender is an admin.
      this.#noteMember(ptnID, from, 'admin')
    })
    this.#log.info({ ptnID, by: from }, 'promoted to admin; CA key received')
    return { type: 'ok' }
  }

  #acceptLeaveNotice (ptnID: string, from: string): PtnReply {
    const row = this.#selectMembership.get(ptnID) as MembershipRow | undefined
    if (!inEffect(row)) return refused('not_member', `This node is not a member of PTN ${ptnID}`)
    this.#noteLeft(ptnID, from)
    return { type: 'ok' }
  }

  /** Re-issues a certificate to a node this admin knows as a member (now or before), or that shows a certificate of
   *  this PTN signed by its CA, expired or not; the role is the one known or shown. */
  #reissue (ptnID: string, presented: string | null, from: string): PtnReply {
    const authority = this.#adminAuthority(ptnID)
    if (authority == null) return refused('not_admin', `This node is not an admin of PTN ${ptnID} holding its CA key`)
    const known = this.#selectMember.get(ptnID, from) as MemberRow | undefined
    const shown = presented == null ? null : checkCertificate(presented, { ptnID, nodeID: from, allowExpired: true })
    const role = known?.role ?? shown?.role
    if (role == null) return refused('not_member', `Node ${from} is not known as a member of PTN ${ptnID}`)
    const certData = this.#issue(authority.ca, authority.row.name, from, role)
    this.#noteMember(ptnID, from, role)
    // An admin is one because it holds the CA key: re-issuing the role without the key would leave it unable to act.
    return role === 'admin' ? { type: 'cert', certData, caKeyHex: caKeyHex(authority.ca) } : { type: 'cert', certData }
  }

  // ---- helpers ----

  #validOwnCertificates (): Array<{ ptnID: string, certData: string }> {
    const valid: Array<{ ptnID: string, certData: string }> = []
    for (const row of this.#selectMemberships.all() as unknown as MembershipRow[]) {
      if (!inEffect(row) || row.cert_data == null) continue
      if (checkCertificate(row.cert_data, { ptnID: row.ptn_id, nodeID: this.#identity.nodeID }) != null) valid.push({ ptnID: row.ptn_id, certData: row.cert_data })
    }
    return valid
  }

  /** Whether `nodeID` is a member of `ptnID` as far as this node can tell: known to it, or presenting a valid
   *  certificate of the PTN in its capability record. */
  #isKnownMember (ptnID: string, nodeID: string): boolean {
    const member = this.#selectMember.get(ptnID, nodeID) as MemberRow | undefined
    if (member?.status === 'active') return true
    const record = this.#peers?.peers().find(peer => peer.nodeID === nodeID)?.record
    return record?.ptnCertificates.some(certData => checkCertificate(certData, { ptnID, nodeID }) != null) === true
  }

  #record (row: MembershipRow): MembershipRecord {
    const { n } = this.#countActiveMembers.get(row.ptn_id) as { n: number }
    return { ptnID: row.ptn_id, name: row.name, role: row.role, members: n, status: row.status }
  }

  #issue (ca: NodeIdentity, ptnName: string, nodeID: string, role: PtnRole): string {
    return issueCertificate(ca, { ptnName, nodeID, role, issuerNodeID: this.#identity.nodeID, ttlMs: this.#certificateTtlMs })
  }

  #requireMembership (ptnID: string): MembershipRow {
    const row = this.#selectMembership.get(ptnID) as MembershipRow | undefined
    if (row == null) throw new NotFoundError(`PTN not found: ${ptnID}`)
    return row
  }

  /** The membership and CA of a PTN this node administers; 404, 403 or 409 (key missing) otherwise. */
  #requireAdmin (ptnID: string): { row: MembershipRow, ca: NodeIdentity } {
    const row = this.#requireMembership(ptnID)
    if (!inEffect(row) || row.role !== 'admin') throw new PermissionError(`This node is not an admin of PTN ${ptnID}`)
    const ca = this.#keys.load(ptnID)
    if (ca == null) throw new ConflictError(`This node is an admin of PTN ${ptnID} but does not hold its CA key; import it with import-ca-key`)
    return { row, ca }
  }

  /** Like `#requireAdmin` for the protocol side: null instead of an error. */
  #adminAuthority (ptnID: string): { row: MembershipRow, ca: NodeIdentity } | null {
    const row = this.#selectMembership.get(ptnID) as MembershipRow | undefined
    if (!inEffect(row) || row.role !== 'admin') return null
    const ca = this.#keys.load(ptnID)
    return ca == null ? null : { row, ca }
  }

  /** 409 when this node already holds MAX_PTN_MEMBERSHIPS memberships in effect: one more could not be taken. */
  #refuseIfFull (): void {
    const n = this.countInEffect()
    if (n >= MAX_PTN_MEMBERSHIPS) {
      throw new ConflictError(`This node is already in ${n} PTNs, the most it may be in (${MAX_PTN_MEMBERSHIPS}); leave one before creating, joining or recovering another`)
    }
  }

  #refuseIfInEffect (ptnID: string): void {
    const row = this.#selectMembership.get(ptnID) as MembershipRow | undefined
    if (inEffect(row)) throw new ConflictError(`This node is already a member of PTN ${ptnID} (status ${row.status})`)
  }

  /** Stores a verified certificate of this node as its membership, and notes the issuer as an admin. */
  #becomeMember (certData: string, status: 'active' | 'recovered'): void {
    const cert = verifyCertificate(certData, { nodeID: this.#identity.nodeID })
    inTransaction(this.#db, () => {
      // Checked again inside the transaction: two joins racing on this node cannot both become the membership.
      if (status === 'active') this.#refuseIfInEffect(cert.ptnID)
      if (!inEffect(this.#selectMembership.get(cert.ptnID) as MembershipRow | undefined)) this.#refuseIfFull()
      this.#upsertMembership.run({ ptn: cert.ptnID, name: cert.ptnName, role: cert.role, status, cert: certData, now: nowIso() })
      this.#noteMember(cert.ptnID, this.#identity.nodeID, cert.role)
      if (cert.issuerNodeID !== this.#identity.nodeID) this.#noteMember(cert.ptnID, cert.issuerNodeID, 'admin')
    })
  }

  /** Records that `nodeID` is an active member of `ptnID` with `role`, as far as this node knows. */
  #noteMember (ptnID: string, nodeID: string, role: PtnRole): void {
    this.#upsertMember.run({ ptn: ptnID, node: nodeID, role, now: nowIso() })
  }

  /** Records that `nodeID` has left `ptnID`, keeping its last role (an admin re-issues that role on recover). */
  #noteLeft (ptnID: string, nodeID: string): void {
    this.#markMemberLeft.run(nowIso(), ptnID, nodeID)
  }

  /** Admins of `ptnID` this node knows of, other than itself, most recently confirmed first. */
  #otherAdmins (ptnID: string): string[] {
    return (this.#selectAdmins.all(ptnID, this.#identity.nodeID) as unknown as MemberRow[]).map(member => member.node_id)
  }

  /**
   * The admins of `ptnID` that can be reached now, other than this node: those this node knows of (most recently
   * confirmed first), then `extra` candidates, then peers whose capability records present a valid admin certificate.
   */
  #reachableAdmins (ptnID: string, extra: string[] = []): string[] {
    if (this.#peers == null) return []
    const candidates = [...this.#otherAdmins(ptnID), ...extra]
    for (const peer of this.#peers.peers()) {
      const advertised = peer.record.ptnCertificates.some(certData => checkCertificate(certData, { ptnID, nodeID: peer.nodeID })?.role === 'admin')
      if (advertised) candidates.push(peer.nodeID)
    }
    const peers = this.#peers
    return [...new Set(candidates)].filter(nodeID => nodeID !== this.#identity.nodeID && peers.isKnownPeer(nodeID))
  }

  async #ask (nodeID: string, request: PtnRequest, options: { signal?: AbortSignal }): Promise<PtnReply> {
    if (this.#peers == null) throw new UnavailableError('The peer network is not running; enable WAN or LAN networking to reach other nodes')
    if (!this.#peers.isKnownPeer(nodeID)) throw new UnavailableError(`Node ${nodeID} is not reachable`)
    return await askPtnPeer(this.#peers, this.#identity, nodeID, request, { signal: options.signal, timeoutMs: this.#requestTimeoutMs })
  }

  #caFromAdmin (keyHex: string, from: string, ptnID: string): NodeIdentity {
    try {
      return caFromHex(keyHex, ptnID)
    } catch (err) {
      if (!(err instanceof CaKeyMismatchError)) throw err
      throw new UnavailableError(`Node ${from} sent a CA key that is not the key of PTN ${ptnID}`)
    }
  }

  #certificateFrom (reply: PtnReply, from: string, ptnID: string): string {
    if (reply.type !== 'cert') throw new UnavailableError(`Node ${from} gave an unexpected answer (${reply.type}) instead of a certificate`)
    try {
      verifyCertificate(reply.certData, { ptnID, nodeID: this.#identity.nodeID })
    } catch (err) {
      if (!(err instanceof InvalidCertificateError)) throw err
      // The admin's fault, not the caller's request: the step could not be completed with that node.
      throw new UnavailableError(`Node ${from} answered with a certificate this node cannot accept: ${err.message}`)
    }
    return reply.certData
  }
}

function refused (reason: Extract<PtnReply, { type: 'refused' }>['reason'], message: string): PtnReply {
  return { type: 'refused', reason, message: message.slice(0, 1000) }
}

function nowIso (): string {
  return new Date().toISOString()
}
