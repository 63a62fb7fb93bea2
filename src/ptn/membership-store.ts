import type { StatementSync } from 'node:sqlite'
import { ConflictError, NotFoundError } from '../errors.ts'
import { inTransaction, type Database } from '../store/index.ts'
import { isValidAt, openCertificate, verifyCertificate, type OpenedCertificate, type PtnRole } from './certificates.ts'
import { MAX_PTN_MEMBERSHIPS, type OwnCertificate } from './memberships.ts'

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

export interface MembershipRow {
  ptn_id: string
  name: string
  role: PtnRole
  status: MembershipStatus
  cert_data: string | null
}

export interface MemberRow {
  node_id: string
  role: PtnRole
  status: 'active' | 'left'
}

/** Statuses in which the membership is in effect: the node holds a certificate and takes part. */
export function inEffect (row: MembershipRow | undefined): row is MembershipRow {
  return row != null && row.status !== 'left'
}

interface OwnEntry extends OwnCertificate {
  cert: OpenedCertificate
}

/**
 * The PTN tables: `ptn_memberships` (this node's own status in each PTN, with its certificate), `ptn_members` (this
 * node's view of the others: the nodes it issued certificates to, the admin that issued its own, the nodes it
 * promoted or was promoted by, and the leave notices it received; `members` counts that view) and `ptn_used_invites`.
 * Each rule that spans rows (one membership per PTN, at most MAX_PTN_MEMBERSHIPS in effect, an invite used once) is
 * checked in the transaction that writes.
 *
 * This node's valid certificates are asked for each time its record is read again (after a change, and by the
 * record's safety timer) and for each peer's request (reserved slots), so their signatures are checked once, when a
 * membership changes, not on every ask: every write to `ptn_memberships` goes through this class, forgets the set
 * and tells `changed`. Expiry is compared on every read, so a certificate stops counting the moment it expires.
 */
export class MembershipStore {
  readonly #db: Database
  readonly #nodeID: string
  /** This node's certificates of the memberships in effect, signature checked; null until asked after a change. */
  #own: OwnEntry[] | null = null
  readonly #now: () => number
  readonly #changed: (() => void) | undefined

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

  /**
   * @param deps.nodeID this node: whose certificates the memberships hold
   * @param options.now the clock certificates are judged by. @default Date.now
   * @param options.changed called after each write to this node's memberships; must not throw
   */
  constructor (deps: { db: Database, nodeID: string }, options: { now?: () => number, changed?: () => void } = {}) {
    this.#db = deps.db
    this.#nodeID = deps.nodeID
    this.#now = options.now ?? (() => Date.now())
    this.#changed = options.changed
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

  // ---- this node's memberships ----

  /** Every membership, with its status, oldest first. */
  list (): MembershipRecord[] {
    return (this.#selectMemberships.all() as unknown as MembershipRow[]).map(row => {
      const { n } = this.#countActiveMembers.get(row.ptn_id) as { n: number }
      return { ptnID: row.ptn_id, name: row.name, role: row.role, members: n, status: row.status }
    })
  }

  /** Memberships in effect (`active` or `recovered`). */
  countInEffect (): number {
    return (this.#countMemberships.get() as { n: number }).n
  }

  get (ptnID: string): MembershipRow | undefined {
    return this.#selectMembership.get(ptnID) as MembershipRow | undefined
  }

  /** The membership of `ptnID`, in effect or left; 404 when this node was never in it. */
  require (ptnID: string): MembershipRow {
    const row = this.get(ptnID)
    if (row == null) throw new NotFoundError(`PTN not found: ${ptnID}`)
    return row
  }

  /** 409 when this node already holds MAX_PTN_MEMBERSHIPS memberships in effect: one more could not be taken. */
  refuseIfFull (): void {
    const n = this.countInEffect()
    if (n >= MAX_PTN_MEMBERSHIPS) {
      throw new ConflictError(`This node is already in ${n} PTNs, the most it may be in (${MAX_PTN_MEMBERSHIPS}); leave one before creating, joining or recovering another`)
    }
  }

  refuseIfInEffect (ptnID: string): void {
    const row = this.get(ptnID)
    if (inEffect(row)) throw new ConflictError(`This node is already a member of PTN ${ptnID} (status ${row.status})`)
  }

  /** The certificates of the memberships in effect that are valid at `now`, oldest joined first. */
  validOwnCertificates (now: number = this.#now()): OwnCertificate[] {
    this.#own ??= this.#openOwn()
    return this.#own.filter(({ cert }) => isValidAt(cert, now)).map(({ ptnID, certData }) => ({ ptnID, certData }))
  }

  /** Records a PTN this node just created, as its admin holding `certData`. */
  addCreated (ptnID: string, name: string, certData: string): void {
    this.#write(() => {
      this.refuseIfFull()
      this.#upsertMembership.run({ ptn: ptnID, name, role: 'admin', status: 'active', cert: certData, now: nowIso() })
      this.noteMember(ptnID, this.#nodeID, 'admin')
    })
  }

  /** Stores a verified certificate of this node as its membership, and notes the issuer as an admin. */
  becomeMember (certData: string, status: 'active' | 'recovered'): void {
    const cert = verifyCertificate(certData, { nodeID: this.#nodeID, now: this.#now() })
    this.#write(() => {
      // Checked again inside the transaction: two joins racing on this node cannot both become the membership.
      if (status === 'active') this.refuseIfInEffect(cert.ptnID)
      if (!inEffect(this.get(cert.ptnID))) this.refuseIfFull()
      this.#upsertMembership.run({ ptn: cert.ptnID, name: cert.ptnName, role: cert.role, status, cert: certData, now: nowIso() })
      this.noteMember(cert.ptnID, this.#nodeID, cert.role)
      if (cert.issuerNodeID !== this.#nodeID) this.noteMember(cert.ptnID, cert.issuerNodeID, 'admin')
    })
  }

  /** Makes this node an admin of `ptnID` holding `certData`, its status kept; `by`, the node that sent it the CA key, is noted as an admin too. */
  becomeAdmin (ptnID: string, status: MembershipStatus, certData: string, by: string | null = null): void {
    this.#write(() => {
      this.#updateMembership.run({ ptn: ptnID, role: 'admin', status, cert: certData, now: nowIso() })
      this.noteMember(ptnID, this.#nodeID, 'admin')
      if (by != null) this.noteMember(ptnID, by, 'admin')
    })
  }

  /** This node has left `ptnID`: its certificate is gone, its last role kept. */
  markLeft (ptnID: string, role: PtnRole): void {
    this.#write(() => {
      this.#updateMembership.run({ ptn: ptnID, role, status: 'left', cert: null, now: nowIso() })
      this.noteLeft(ptnID, this.#nodeID)
    })
  }

  // ---- the others ----

  member (ptnID: string, nodeID: string): MemberRow | undefined {
    return this.#selectMember.get(ptnID, nodeID) as MemberRow | undefined
  }

  /** Records that `nodeID` is an active member of `ptnID` with `role`, as far as this node knows. */
  noteMember (ptnID: string, nodeID: string, role: PtnRole): void {
    this.#upsertMember.run({ ptn: ptnID, node: nodeID, role, now: nowIso() })
  }

  /** Records that `nodeID` has left `ptnID`, keeping its last role (an admin re-issues that role on recover). */
  noteLeft (ptnID: string, nodeID: string): void {
    this.#markMemberLeft.run(nowIso(), ptnID, nodeID)
  }

  /** Admins of `ptnID` this node knows of, other than itself, most recently confirmed first. */
  otherAdmins (ptnID: string): string[] {
    return (this.#selectAdmins.all(ptnID, this.#nodeID) as unknown as MemberRow[]).map(member => member.node_id)
  }

  /**
   * Redeems an invite for `nodeID`: records its nonce as used, notes `nodeID` as a provider and returns what `issue`
   * makes, all in one transaction; null when the nonce was used before. The nonce is recorded in the transaction that
   * checks it, so two redemptions cannot both pass.
   */
  redeemInvite<T> (nonce: string, ptnID: string, nodeID: string, issue: () => T): T | null {
    return inTransaction(this.#db, () => {
      if (this.#selectUsedInvite.get(nonce) != null) return null
      this.#insertUsedInvite.run(nonce, ptnID, nodeID, nowIso())
      this.noteMember(ptnID, nodeID, 'provider')
      return issue()
    })
  }

  /** Every write to `ptn_memberships`: one transaction, after which this node's certificates are opened again. */
  #write (body: () => void): void {
    try {
      inTransaction(this.#db, body)
    } finally {
      this.#own = null   // also after a rollback: the next read opens what is committed
    }
    this.#changed?.()
  }

  #openOwn (): OwnEntry[] {
    const own: OwnEntry[] = []
    for (const row of this.#selectMemberships.all() as unknown as MembershipRow[]) {
      if (!inEffect(row) || row.cert_data == null) continue
      const cert = openCertificate(row.cert_data)
      if (cert?.payload.ptnID === row.ptn_id && cert.payload.nodeID === this.#nodeID) own.push({ ptnID: row.ptn_id, certData: row.cert_data, cert })
    }
    return own
  }
}

export function nowIso (): string {
  return new Date().toISOString()
}
