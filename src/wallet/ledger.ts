import { randomUUID } from 'node:crypto'
import { EventEmitter } from 'node:events'
import type { StatementSync } from 'node:sqlite'
import { InsufficientCreditsError } from '../errors.ts'
import { inTransaction, type Database } from '../store/index.ts'
import { formatCredits } from './credits.ts'

/** A new node starts with 100 credits. */
export const GRANT_MICRO = 100_000_000
/** The CHECK constraint's ceiling: above 2^53 a JSON number (and node:sqlite's number) is no longer exact. */
const MAX_BALANCE_MICRO = Number.MAX_SAFE_INTEGER

export type TransactionType = 'earn' | 'spend' | 'grant'

export interface WalletTransaction {
  id: string
  type: TransactionType
  amountMicro: number
  /** The counterparty; null for the grant. */
  peerID: string | null
  memo: string
  timestamp: string
}

export interface WalletTotals {
  balanceMicro: number
  earnedMicro: number
  spentMicro: number
  transactionCount: number
  /** Outgoing transfers debited here and not yet acknowledged by their payee. */
  pendingTransfers: number
}

/** An outgoing transfer not yet acknowledged, as the owner sees it: to whom, how often tried, and why it failed. */
export interface PendingTransfer {
  id: string
  peerID: string
  amountMicro: number
  memo: string
  createdAt: string
  /** Deliveries tried and not acknowledged. */
  attempts: number
  /** Why the last attempt failed, naming the payee; null before the first failure. */
  lastError: string | null
  /** When it goes out again at the latest, Unix ms (at once when the payee comes back online). */
  nextAttemptMs: number
}

/**
 * A transfer debited or credited by the ledger, as the caller hands it in: the fields it signed (checked before they
 * get here) and its signature, from which the envelope is rebuilt to be delivered again. `peerID` is the payee of an
 * outgoing transfer and the payer of an incoming one.
 */
export interface TransferRecord {
  id: string
  peerID: string
  amountMicro: number
  memo: string
  createdAt: string
  signature: string
}

/** An outgoing transfer as the outbox delivers it. */
export interface OutgoingTransfer extends TransferRecord {
  attempts: number
}

/** What the ledger tells listeners once a transaction is committed (the dashboard's live balance). */
export interface LedgerEvents {
  transaction: [transaction: WalletTransaction, balanceMicro: number]
}

/**
 * - `applied`: credited now; `duplicate`: credited before, nothing changed
 * - `conflict`: the id is known with other content (or is one of our own outgoing ids): refused
 * - `over_limit`: crediting it would take the balance past 2^53 micro-credits: refused
 */
export type ReceiveResult = 'applied' | 'duplicate' | 'conflict' | 'over_limit'

/**
 * The node's credits in SQLite. Every rule is enforced in one IMMEDIATE transaction here, with a
 * constraint behind it: the balance never goes below zero (`UPDATE … WHERE balance >= …`, CHECK), a transfer id is
 * applied at most once on each side (PRIMARY KEY), the grant happens once (a unique partial index). The transaction
 * log is append-only: nothing here updates or deletes a transaction.
 */
export class Ledger {
  /** Emitted after commit, never inside a transaction; listeners must not throw. */
  readonly events = new EventEmitter<LedgerEvents>()
  readonly #db: Database
  readonly #balance: StatementSync
  readonly #debit: StatementSync
  readonly #credit: StatementSync
  readonly #insertTransaction: StatementSync
  readonly #insertTransfer: StatementSync
  readonly #findTransfer: StatementSync
  readonly #findGrant: StatementSync
  readonly #totals: StatementSync
  readonly #pendingCount: StatementSync
  readonly #pendingList: StatementSync
  readonly #list: StatementSync
  readonly #due: StatementSync
  readonly #nextAttempt: StatementSync
  readonly #acknowledge: StatementSync
  readonly #deferOne: StatementSync
  readonly #duePeers: StatementSync
  readonly #retryNow: StatementSync

  constructor (deps: { db: Database }) {
    const db = this.#db = deps.db
    this.#balance = db.prepare('SELECT balance_micro FROM wallet_balance WHERE id = 1')
    // The balance check and the debit are one statement: it changes no row when the balance, less what is held for
    // requests in flight, does not cover the amount.
    this.#debit = db.prepare('UPDATE wallet_balance SET balance_micro = balance_micro - ? WHERE id = 1 AND balance_micro - ? >= ?')
    this.#credit = db.prepare('UPDATE wallet_balance SET balance_micro = balance_micro + ? WHERE id = 1 AND balance_micro + ? <= ?')
    this.#insertTransaction = db.prepare('INSERT INTO wallet_transactions (id, type, amount_micro, peer_id, memo, timestamp) VALUES (?, ?, ?, ?, ?, ?)')
    this.#insertTransfer = db.prepare(`INSERT INTO wallet_transfers (id, direction, peer_id, amount_micro, memo, created_at, signature, state, settled_at)
      VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`)
    this.#findTransfer = db.prepare('SELECT direction, peer_id, amount_micro, memo, created_at FROM wallet_transfers WHERE id = ?')
    this.#findGrant = db.prepare("SELECT 1 FROM wallet_transactions WHERE type = 'grant'")
    this.#totals = db.prepare(`SELECT
        COALESCE(SUM(CASE WHEN type = 'earn' THEN amount_micro END), 0) AS earned,
        COALESCE(SUM(CASE WHEN type = 'spend' THEN amount_micro END), 0) AS spent,
        COUNT(*) AS count
      FROM wallet_transactions`)
    this.#pendingCount = db.prepare("SELECT COUNT(*) AS count FROM wallet_transfers WHERE state = 'pending'")
    this.#pendingList = db.prepare(`SELECT id, peer_id, amount_micro, memo, created_at, attempts, last_error, next_attempt_ms FROM wallet_transfers
      WHERE state = 'pending' ORDER BY rowid LIMIT ? OFFSET ?`)
    this.#list = db.prepare('SELECT id, type, amount_micro, peer_id, memo, timestamp FROM wallet_transactions ORDER BY seq DESC LIMIT ? OFFSET ?')
    this.#due = db.prepare(`SELECT id, peer_id, amount_micro, memo, created_at, signature, attempts FROM wallet_transfers
      WHERE state = 'pending' AND next_attempt_ms <= ? AND (? IS NULL OR peer_id = ?) ORDER BY next_attempt_ms, rowid LIMIT ?`)
    this.#nextAttempt = db.prepare("SELECT MIN(next_attempt_ms) AS next FROM wallet_transfers WHERE state = 'pending'")
    this.#acknowledge = db.prepare("UPDATE wallet_transfers SET state = 'acknowledged', settled_at = ?, last_error = NULL WHERE id = ? AND state = 'pending'")
    this.#deferOne = db.prepare("UPDATE wallet_transfers SET attempts = attempts + 1, next_attempt_ms = ?, last_error = ? WHERE id = ? AND state = 'pending'")
    this.#duePeers = db.prepare("SELECT DISTINCT peer_id FROM wallet_transfers WHERE state = 'pending' AND next_attempt_ms <= ?")
    this.#retryNow = db.prepare("UPDATE wallet_transfers SET next_attempt_ms = 0 WHERE state = 'pending' AND peer_id = ?")
    this.#ensureGrant()
  }

  balanceMicro (): number {
    return (this.#balance.get() as { balance_micro: number }).balance_micro
  }

  totals (): WalletTotals {
    const row = this.#totals.get() as { earned: number, spent: number, count: number }
    return {
      balanceMicro: this.balanceMicro(),
      earnedMicro: row.earned,
      spentMicro: row.spent,
      transactionCount: row.count,
      pendingTransfers: (this.#pendingCount.get() as { count: number }).count
    }
  }

  /** Newest first, skipping the `offset` newest (a page of the list). */
  transactions (limit: number, offset = 0): WalletTransaction[] {
    const rows = this.#list.all(limit, offset) as Array<{ id: string, type: TransactionType, amount_micro: number, peer_id: string | null, memo: string, timestamp: string }>
    return rows.map((row) => ({ id: row.id, type: row.type, amountMicro: row.amount_micro, peerID: row.peer_id, memo: row.memo, timestamp: row.timestamp }))
  }

  /**
   * Debits an outgoing transfer and queues it for delivery, in one transaction: the `spend` and the outbox row exist
   * together or not at all. `heldMicro` (credits held for requests in flight) must stay covered after the debit.
   * Throws InsufficientCreditsError and changes nothing when the balance does not cover it.
   */
  send (transfer: TransferRecord, options: { heldMicro?: number } = {}): { balanceMicro: number, transaction: WalletTransaction } {
    const held = options.heldMicro ?? 0
    const result = inTransaction(this.#db, () => {
      if (this.#debit.run(transfer.amountMicro, transfer.amountMicro, held).changes === 0) {
        const balance = this.balanceMicro()
        throw new InsufficientCreditsError(`Insufficient credits: need ${formatCredits(transfer.amountMicro)}, have ${formatCredits(Math.max(0, balance - held))}` +
          (held > 0 ? ` available (${formatCredits(held)} held for requests in flight)` : ''))
      }
      this.#insertTransfer.run(transfer.id, 'outgoing', transfer.peerID, transfer.amountMicro, transfer.memo, transfer.createdAt, transfer.signature, 'pending', null)
      const transaction = this.#append(transfer.id, 'spend', transfer.amountMicro, transfer.peerID, transfer.memo, transfer.createdAt)
      return { balanceMicro: this.balanceMicro(), transaction }
    })
    this.events.emit('transaction', result.transaction, result.balanceMicro)
    return result
  }

  /**
   * Credits an incoming transfer at most once. A transfer id seen before with the same signed content is a
   * `duplicate` (a retry or a replay: acknowledged again, applied once); with other content, or one of our own
   * outgoing ids, a `conflict` (refused). Committed before it returns, so an acknowledgement never precedes it.
   */
  receive (transfer: TransferRecord): ReceiveResult {
    return this.receiveAll([transfer])[0]
  }

  /**
   * `receive` for each of `transfers`, in order, in one transaction: a peer's batch costs one commit (one sync to
   * disk), not one a transfer.
   */
  receiveAll (transfers: readonly TransferRecord[]): ReceiveResult[] {
    const outcomes = inTransaction(this.#db, () => transfers.map((transfer): { result: ReceiveResult, transaction?: WalletTransaction } => {
      const seen = this.#findTransfer.get(transfer.id) as { direction: string, peer_id: string, amount_micro: number, memo: string, created_at: string } | undefined
      if (seen != null) {
        // The same signed body (its `to` is always this node) is a retry or a replay; anything else reuses the id.
        const same = seen.direction === 'incoming' && seen.peer_id === transfer.peerID && seen.amount_micro === transfer.amountMicro &&
          seen.memo === transfer.memo && seen.created_at === transfer.createdAt
        return { result: same ? 'duplicate' : 'conflict' }
      }
      if (this.#credit.run(transfer.amountMicro, transfer.amountMicro, MAX_BALANCE_MICRO).changes === 0) return { result: 'over_limit' }
      const now = new Date().toISOString()
      this.#insertTransfer.run(transfer.id, 'incoming', transfer.peerID, transfer.amountMicro, transfer.memo, transfer.createdAt, transfer.signature, 'received', now)
      return { result: 'applied', transaction: this.#append(transfer.id, 'earn', transfer.amountMicro, transfer.peerID, transfer.memo, now) }
    }))
    const applied = outcomes.flatMap(({ transaction }) => transaction == null ? [] : [transaction])
    if (applied.length > 0) {
      // Each with the balance after it, as one taken alone would have: the last one's is the balance now
      let after = this.balanceMicro() - applied.reduce((sum, transaction) => sum + transaction.amountMicro, 0)
      for (const transaction of applied) {
        after += transaction.amountMicro
        this.events.emit('transaction', transaction, after)
      }
    }
    return outcomes.map(({ result }) => result)
  }

  /** Outgoing transfers debited and not yet acknowledged, oldest first. */
  pendingTransfers (limit: number, offset = 0): PendingTransfer[] {
    const rows = this.#pendingList.all(limit, offset) as Array<{ id: string, peer_id: string, amount_micro: number, memo: string, created_at: string, attempts: number, last_error: string | null, next_attempt_ms: number }>
    return rows.map((row) => ({
      id: row.id, peerID: row.peer_id, amountMicro: row.amount_micro, memo: row.memo, createdAt: row.created_at,
      attempts: row.attempts, lastError: row.last_error, nextAttemptMs: row.next_attempt_ms
    }))
  }

  /** Outgoing transfers due for (re)delivery at `nowMs`, oldest first; of one peer when `peerID` is given. */
  dueTransfers (nowMs: number, options: { peerID?: string, limit: number }): OutgoingTransfer[] {
    const peer = options.peerID ?? null
    const rows = this.#due.all(nowMs, peer, peer, options.limit) as Array<{ id: string, peer_id: string, amount_micro: number, memo: string, created_at: string, signature: string, attempts: number }>
    return rows.map((row) => ({ id: row.id, peerID: row.peer_id, amountMicro: row.amount_micro, memo: row.memo, createdAt: row.created_at, signature: row.signature, attempts: row.attempts }))
  }

  /** Peers with outgoing transfers due at `nowMs`. */
  duePeers (nowMs: number): string[] {
    return (this.#duePeers.all(nowMs) as Array<{ peer_id: string }>).map((row) => row.peer_id)
  }

  /** Makes every pending transfer to `peerID` due now (the peer is back: no reason to wait out the backoff). */
  retryNow (peerID: string): void {
    this.#retryNow.run(peerID)
  }

  /** When the earliest pending transfer is due, in Unix ms; null when nothing is pending. */
  nextAttemptMs (): number | null {
    return (this.#nextAttempt.get() as { next: number | null }).next
  }

  /** The payee acknowledged it: never sent again. Idempotent. */
  markAcknowledged (id: string): void {
    this.#acknowledge.run(new Date().toISOString(), id)
  }

  /** Not acknowledged this time: try again at `nextAttemptMs`. The debit stands (a transfer is never refunded). */
  deferTransfers (ids: string[], nextAttemptMs: number, reason: string): void {
    inTransaction(this.#db, () => {
      for (const id of ids) this.#deferOne.run(nextAttemptMs, reason.slice(0, 500), id)
    })
  }

  /** The 100-credit grant, once per database; the unique index on grant rows stops a second one. */
  #ensureGrant (): void {
    inTransaction(this.#db, () => {
      if (this.#findGrant.get() != null) return
      this.#credit.run(GRANT_MICRO, GRANT_MICRO, MAX_BALANCE_MICRO)
      this.#append(randomUUID(), 'grant', GRANT_MICRO, null, 'welcome grant', new Date().toISOString())
    })
  }

  #append (id: string, type: TransactionType, amountMicro: number, peerID: string | null, memo: string, timestamp: string): WalletTransaction {
    this.#insertTransaction.run(id, type, amountMicro, peerID, memo, timestamp)
    return { id, type, amountMicro, peerID, memo, timestamp }
  }
}
