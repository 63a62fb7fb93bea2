import type { Logger } from 'pino'
import { errorText } from '../errors.ts'
import type { NodeID } from '../identity/index.ts'
import { backoffDelayMs, type SignedEnvelope } from '../wire/index.ts'
import type { Ledger, OutgoingTransfer } from './ledger.ts'
import { storedEnvelope, type Transfer, type TransferAck } from './transfer-protocol.ts'

/** Sends one batch of signed transfers to a peer and returns its acks in order; throws when it was not acknowledged. */
export type DeliverTransfers = (peerID: string, envelopes: Array<SignedEnvelope<Transfer>>, options: { signal: AbortSignal }) => Promise<TransferAck[]>

export interface TransferOutboxDeps {
  ledger: Ledger
  deliver: DeliverTransfers
  /** This node: the payer of every outgoing transfer. */
  nodeID: NodeID
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
 *
 * A transfer is sent again at its own backoff, or at once when its payee comes back online (`peerOnline`), and at no
 * other time: a peer's record changing says nothing about whether it will accept what it refused. A failure of the
 * outbox itself (the database refusing a write: a full disk) is logged and retried with backoff; it never ends the
 * process, and what it could not write stays pending.
 */
export class TransferOutbox {
  readonly #ledger: Ledger
  readonly #deliver: DeliverTransfers
  readonly #nodeID: NodeID
  readonly #log: Logger
  readonly #minRetryMs: number
  readonly #maxRetryMs: number
  readonly #batchSize: number
  readonly #workers = new Map<string, Promise<void>>()
  readonly #again = new Set<string>()
  /** Consecutive failures of the outbox itself, per peer (null key: the scheduler), for its retry backoff. */
  readonly #faults = new Map<string | null, number>()
  readonly #retries = new Set<NodeJS.Timeout>()
  /** Peers whose last delivery failed: a new stranding is logged at warn once, the retries at debug. */
  readonly #stranded = new Set<string>()
  #timer: NodeJS.Timeout | null = null
  #shutdown: AbortController | null = null

  constructor (deps: TransferOutboxDeps, options: TransferOutboxOptions = {}) {
    this.#ledger = deps.ledger
    this.#deliver = deps.deliver
    this.#nodeID = deps.nodeID
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

  /** Delivers `peerID`'s pending transfers that are due (a new one is due at once). */
  kick (peerID: string): void {
    if (!this.#running) return
    if (this.#workers.has(peerID)) {
      this.#again.add(peerID) // the running worker looks again when it is done, so nothing queued now waits a backoff
      return
    }
    const worker = this.#drain(peerID).then(() => {
      this.#faults.delete(peerID)
    }, (err: unknown) => {
      this.#retryAfterFault(peerID, err)
    }).finally(() => {
      this.#workers.delete(peerID)
      if (this.#again.delete(peerID)) this.kick(peerID)
      else this.#schedule()
    })
    this.#workers.set(peerID, worker)
  }

  /** `peerID` is back online: what we owe it goes out now, without waiting out the backoff of its failed attempts. */
  peerOnline (peerID: string): void {
    if (!this.#running) return
    try {
      this.#ledger.retryNow(peerID)
    } catch (err) {
      this.#retryAfterFault(peerID, err)
      return
    }
    this.kick(peerID)
  }

  /** Stops delivering; transfers in flight stay pending and go out again after the next start. */
  async stop (): Promise<void> {
    this.#shutdown?.abort(new Error('the node is stopping'))
    if (this.#timer != null) clearTimeout(this.#timer)
    this.#timer = null
    for (const retry of this.#retries) clearTimeout(retry)
    this.#retries.clear()
    await Promise.allSettled([...this.#workers.values()])
  }

  get #running (): boolean {
    return this.#shutdown != null && !this.#shutdown.signal.aborted
  }

  #wake (): void {
    try {
      for (const peerID of this.#ledger.duePeers(Date.now())) this.kick(peerID)
    } catch (err) {
      this.#retryAfterFault(null, err)
      return
    }
    this.#schedule()
  }

  /** One timer, for the earliest pending retry of any peer. */
  #schedule (): void {
    if (!this.#running) return
    if (this.#timer != null) clearTimeout(this.#timer)
    this.#timer = null
    let next: number | null
    try {
      next = this.#ledger.nextAttemptMs()
    } catch (err) {
      this.#retryAfterFault(null, err)
      return
    }
    this.#faults.delete(null)
    if (next == null) return
    this.#timer = setTimeout(() => { this.#timer = null; this.#wake() }, Math.max(10, next - Date.now()))
    this.#timer.unref()
  }

  /**
   * The outbox itself failed (the ledger threw: a database that refuses writes, a full disk): log it and try again
   * after a backoff of its own. Nothing is lost: a transfer not marked acknowledged is still pending.
   */
  #retryAfterFault (peerID: string | null, err: unknown): void {
    if (!this.#running) return
    const faults = (this.#faults.get(peerID) ?? 0) + 1
    this.#faults.set(peerID, faults)
    const retryInMs = backoffDelayMs(faults, { minMs: this.#minRetryMs, maxMs: this.#maxRetryMs })
    this.#log.error({ err, peerID, faults, retryInMs }, 'the transfer outbox failed; retrying')
    const retry = setTimeout(() => {
      this.#retries.delete(retry)
      if (peerID == null) this.#wake()
      else this.kick(peerID)
    }, retryInMs)
    retry.unref()
    this.#retries.add(retry)
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
    const ready: Array<{ transfer: OutgoingTransfer, envelope: SignedEnvelope<Transfer> }> = []
    for (const transfer of batch) {
      try {
        const { id, amountMicro, memo, createdAt, signature } = transfer
        ready.push({ transfer, envelope: storedEnvelope({ id, from: this.#nodeID, to: transfer.peerID, amountMicro, memo, createdAt, signature }) })
      } catch (err) {
        // A row the ledger's constraints let through but that no longer verifies: never sent as it is, kept pending
        // (at the longest delay) and in the log, where its owner can see it.
        this.#ledger.deferTransfers([transfer.id], Date.now() + this.#maxRetryMs, `stored transfer does not verify: ${deliveryFailure(peerID, err)}`)
        this.#log.error({ err, peerID, transferID: transfer.id }, 'a stored transfer does not verify; not sent')
      }
    }
    if (ready.length === 0) return false
    let acks: TransferAck[]
    try {
      acks = await this.#deliver(peerID, ready.map(({ envelope }) => envelope), { signal })
    } catch (err) {
      if (signal.aborted) return false // stopping: the batch stays pending as it is
      const attempts = Math.max(...ready.map(({ transfer }) => transfer.attempts))
      const reason = deliveryFailure(peerID, err)
      this.#ledger.deferTransfers(ready.map(({ transfer }) => transfer.id), Date.now() + backoffDelayMs(attempts + 1, { minMs: this.#minRetryMs, maxMs: this.#maxRetryMs }), reason)
      // Said once per stranding, at warn (the owner's credits are debited and not delivered); every retry at debug.
      if (this.#stranded.has(peerID)) this.#log.debug({ peerID, transfers: ready.length, attempts: attempts + 1, reason }, 'transfer delivery failed; will retry')
      else this.#log.warn({ peerID, transfers: ready.length, reason }, 'transfers stranded: the payee cannot be reached; retrying at backoff and when it comes back online')
      this.#stranded.add(peerID)
      return false
    }
    if (this.#stranded.delete(peerID)) this.#log.info({ peerID }, 'payee reachable again; stranded transfers delivered')
    let allAcknowledged = ready.length === batch.length
    ready.forEach(({ transfer }, i) => {
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

/** Why a delivery to `peerID` failed, as stored and listed: always naming the peer, never "undefined". */
function deliveryFailure (peerID: string, err: unknown): string {
  const reason = err instanceof Error ? `${err.name}: ${errorText(err)}` : errorText(err)
  return reason.includes(peerID) ? reason : `Peer ${peerID}: ${reason}`
}
