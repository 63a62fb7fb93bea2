import { z } from 'zod'
import { MAX_TRANSFER_MEMO_CHARS, MAX_TRANSFER_MICRO, MICRO_PER_CREDIT, creditsToMicro, microToCredits, type PendingTransfer as LedgerPendingTransfer, type WalletTransaction as LedgerTransaction } from '../../wallet/index.ts'
import { IsoTime, SNAKE_ALIASES, queryInteger, withAliases } from './common.ts'

// Credits cross the HTTP edge as JSON numbers and are integer micro-credits everywhere behind it.
/** The most one send may move: 10^9 credits (the transfer protocol's limit). */
export const MAX_SEND_CREDITS = MAX_TRANSFER_MICRO / MICRO_PER_CREDIT
export const MAX_MEMO_CHARS = MAX_TRANSFER_MEMO_CHARS

/** True when `credits` has at most 6 decimals, i.e. is a whole number of micro-credits. */
function wholeMicro (credits: number): boolean {
  return creditsToMicro(credits) / MICRO_PER_CREDIT === credits
}

/** The wallet summary, with `pendingTransfers` (an addition): sends and payments debited here that the payee has not acknowledged. */
export const WalletSummary = z.object({
  currentBalance: z.number(),
  totalEarned: z.number(),
  totalSpent: z.number(),
  transactionCount: z.number().int(),
  pendingTransfers: z.number().int()
})
export type WalletSummary = z.infer<typeof WalletSummary>

/** One wallet transaction. `peerID` is null for the grant. */
export const WalletTransaction = z.object({
  id: z.string(),
  type: z.enum(['earn', 'spend', 'grant']),
  amount: z.number(),
  peerID: z.string().nullable(),
  memo: z.string(),
  timestamp: IsoTime
})
export type WalletTransaction = z.infer<typeof WalletTransaction>

/** A ledger transaction at the HTTP edge: credits as JSON numbers. */
export function transactionBody (transaction: LedgerTransaction): WalletTransaction {
  return {
    id: transaction.id,
    type: transaction.type,
    amount: microToCredits(transaction.amountMicro),
    peerID: transaction.peerID,
    memo: transaction.memo,
    timestamp: transaction.timestamp
  }
}

export const TransactionList = z.object({ transactions: z.array(WalletTransaction) })

/** An addition: a send or payment debited here that its payee has not acknowledged yet. */
export const PendingTransfer = z.object({
  id: z.string().describe('the transaction id of its `spend`'),
  peerID: z.string().describe('the payee'),
  amount: z.number(),
  memo: z.string(),
  createdAt: IsoTime,
  attempts: z.number().int().describe('deliveries tried and not acknowledged'),
  lastError: z.string().nullable().describe('why the last delivery failed, naming the payee; null before the first failure'),
  nextAttemptAt: IsoTime.describe('when it goes out again at the latest; at once when the payee comes back online')
})
export type PendingTransfer = z.infer<typeof PendingTransfer>

export function pendingTransferBody (transfer: LedgerPendingTransfer): PendingTransfer {
  return {
    id: transfer.id,
    peerID: transfer.peerID,
    amount: microToCredits(transfer.amountMicro),
    memo: transfer.memo,
    createdAt: transfer.createdAt,
    attempts: transfer.attempts,
    lastError: transfer.lastError,
    nextAttemptAt: new Date(transfer.nextAttemptMs).toISOString()
  }
}

export const PendingTransferList = z.object({ transfers: z.array(PendingTransfer) })
export type TransactionList = z.infer<typeof TransactionList>

/** `limit`: default 20, 1 to 500, an integer; anything else is a 400 (never clamped). */
export const TransactionsQuery = z.object({
  limit: queryInteger(1, 500).default(20),
  offset: queryInteger(0, Number.MAX_SAFE_INTEGER).default(0).describe('an addition: skip this many of the newest (pages)')
})

export const SendBody = withAliases(z.object({
  amount: z.number().positive().max(MAX_SEND_CREDITS).refine(wholeMicro, { message: 'must have at most 6 decimals' }),
  peerID: z.string().min(1).max(256),
  memo: z.string().max(MAX_MEMO_CHARS).nullish()
}), SNAKE_ALIASES)
export type SendBody = z.infer<typeof SendBody>

/** The answer to a send. */
export const SendResult = z.object({
  transactionID: z.string(),
  amount: z.number(),
  peerID: z.string(),
  newBalance: z.number()
})
export type SendResult = z.infer<typeof SendResult>

/** The on-chain status of the node's address: `balance` in SOL, null when the RPC endpoint did not answer (`disconnected`). */
export const ChainStatus = z.object({
  address: z.string(),
  balance: z.number().nullable(),
  status: z.enum(['connected', 'disconnected'])
})
export type ChainStatus = z.infer<typeof ChainStatus>
