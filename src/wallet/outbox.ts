import type { Logger } from 'pino'
import type { TransferAck } from '../network/index.ts'
import { backoffDelayMs, type SignedEnvelope } from '../wire/index.ts'
import type { Ledger, OutgoingTransfer } from './ledger.ts'

/** Sends one batch of signed transfers to a peer and returns its acks in order; throws when it was not acknowledged. */
export type DeliverTransfers = (peerID: string, envelopes: SignedEnvelope[], options: { signal: AbortSignal }) => Promise<TransferAck[]>

export interface TransferOutboxDeps {
  ledger: Ledger
  deliver: DeliverTransfers
  log: Logger
}

export interface TransferOutboxOptions {
  /** First retry after a failed delivery; doubles per attempt, with jitter. @default 500 */
  minRetryMs?: number
  /** Ceiling of the retry delay: an unreachable payee costs one dial per this long. @default 30_000 */
  maxRetryMs?: number
  /** Transfers per delivery. @default 50 */
  batchSize?: number
}

/**
 * Delivers debited transfers until each payee acknowledges it, across restarts: the outbox is the `pending` rows of
 * the ledger, so a transfer debited before a crash is delivered after it. There are no refunds: a transfer whose
 * fate is unknown (the payee may have applied it) is sent again, never credited back, so it can never be both
 * kept by the payee and refunded to us. One delivery runs per peer at a time; each peer's backlog goes in batches.
 */
export class TransferOutbox {
  readonly #ledger: Ledger
  readonly #deliver: DeliverTransfers
  readonly #log: Logger
  readonly #minRetryMs: number
  readonly #maxRetryMs: number
  readonly #batchSize: number
  readonly #workers = new Map<string, Promise<void>>()
  readonly #again = new Set<string>()
  #timer: NodeJS.Timeout | null = null
  #shutdown: AbortController | null = null

  constructor (deps: TransferOutboxDeps, options: TransferOutboxOptions = {}) {
    this.#ledger = deps.ledger
    this.#deliver = deps.deliver
    this.#log = deps.log
    this.#minRetryMs = options.minRetryMs ?? 500
    this.#maxRetryMs = options.maxRetryMs ?? 30_000
    this.#batchSize = options.batchSize ?? 50
  }

  /** Resumes every pending transfer, including those debited before a restart. */
  start (): void {
    if (this.#shutdown != null) return
    this.#shutdown = new AbortController()
    this.#wake()
  }

  /** Delivers `peerID`'s pending transfers now (after a send, or when the peer reconnects), ignoring their backoff. */
  kick (peerID: string, options: { ignoreBackoff?: boolean } = {}): void {
    if (this.#shutdown == null || this.#shutdown.signal.aborted) return
    if (options.ignoreBackoff === true) this.#ledger.retryNow(peerID)
    if (this.#workers.has(peerID)) {
      this.#again.add(peerID) // the running worker looks again when it is done, so nothing queued now waits a backoff
      return
    }
    const worker = this.#drain(peerID).finally(() => {
      this.#workers.delete(peerID)
      if (this.#again.delete(peerID)) this.kick(peerID)
      else this.#schedule()
    })
    this.#workers.set(peerID, worker)
  }

  /** Stops delivering; transfers in flight stay pending and go out again after the next start. */
  async stop (): Promise<void> {
    this.#shutdown?.abort(new Error('the node is stopping'))
    if (this.#timer != null) clearTimeout(this.#timer)
    this.#timer = null
    await Promise.allSettled([...this.#workers.values()])
  }

  #wake (): void {
    for (const peerID of this.#ledger.duePeers(Date.now())) this.kick(peerID)
    this.#schedule()
  }

  /** One timer, for the earliest pending retry of any peer. */
  #schedule (): void {
    if (this.#shutdown == null || this.#shutdown.signal.aborted) return
    if (this.#timer != null) clearTimeout(this.#timer)
    this.#timer = null
    const next = this.#ledger.nextAttemptMs()
    if (next == null) return
    this.#timer = setTimeout(() => { this.#timer = null; this.#wake() }, Math.max(10, next - Date.now()))
    this.#timer.unref()
  }

  async #drain (peerID: string): Promise<void> {
    const signal = this.#shutdown?.signal
    while (signal != null && !signal.aborted) {
      const batch = this.#ledger.dueTransfers(Date.now(), { peerID, limit: this.#batchSize })
      if (batch.length === 0) return
      if (!await this.#deliverBatch(peerID, batch, signal)) return
    }
  }

  /** True when every transfer of the batch was acknowledged. */
  async #deliverBatch (peerID: string, batch: OutgoingTransfer[], signal: AbortSignal): Promise<boolean> {
    let acks: TransferAck[]
    try {
      acks = await this.#deliver(peerID, batch.map((t) => JSON.parse(t.envelope) as SignedEnvelope), { signal })
    } catch (err) {
      if (signal.aborted) return false // stopping: the batch stays pending as it is
      const attempts = Math.max(...batch.map((t) => t.attempts))
      this.#ledger.deferTransfers(batch.map((t) => t.id), Date.now() + backoffDelayMs(attempts + 1, { minMs: this.#minRetryMs, maxMs: this.#maxRetryMs }), errorText(err))
      this.#log.debug({ err, peerID, transfers: batch.length, attempts: attempts + 1 }, 'transfer delivery failed; will retry')
      return false
    }
    let allAcknowledged = true
    batch.forEach((transfer, i) => {
      const ack = acks[i]
      if (ack.id === transfer.id && (ack.status === 'applied' || ack.status === 'duplicate')) {
        this.#ledger.markAcknowledged(transfer.id)
        return
      }
      // A payee that refuses a transfer we signed correctly runs other code than ours (or is broken): keep it
      // pending at the longest delay; an upgraded payee may still take it, and the debit stands either way.
      allAcknowledged = false
      const reason = ack.id === transfer.id ? `refused: ${ack.reason ?? 'no reason given'}` : `ack for ${String(ack.id)}, expected ${transfer.id}`
      this.#ledger.deferTransfers([transfer.id], Date.now() + this.#maxRetryMs, reason)
      this.#log.warn({ peerID, transferID: transfer.id, reason }, 'payee did not accept a transfer; will retry')
    })
    return allAcknowledged
  }

}

function errorText (err: unknown): string {
  return err instanceof Error ? `${err.name}: ${err.message}` : String(err)
}
