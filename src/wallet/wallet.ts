import { randomUUID } from 'node:crypto'
import type { Stream } from '@libp2p/interface'
import type { Logger } from 'pino'
import { InsufficientCreditsError, InvalidInputError, NotFoundError } from '../errors.ts'
import { parseNodeID, type NodeID, type NodeIdentity } from '../identity/index.ts'
import { ProtocolError, type PeerStreams } from '../wire/index.ts'
import { formatCredits } from './credits.ts'
import type { Ledger, PendingTransfer, TransferRecord, WalletTotals, WalletTransaction } from './ledger.ts'
import { TransferOutbox, type TransferOutboxOptions } from './outbox.ts'
import { inferenceCostMicro } from './pricing.ts'
import {
  MAX_TRANSFER_MEMO_CHARS, MAX_TRANSFER_MICRO, TRANSFER_HANDLER_OPTIONS, TRANSFER_PROTOCOL,
  createTransferHandler, deliverTransfers, signTransfer, type ReceiveOutcome, type Transfer
} from './transfer-protocol.ts'

/** Tokens a paid request without `max_tokens` is assumed to need, for the credits held before it goes out. */
export const DEFAULT_HOLD_TOKENS = 1024

/** What the wallet uses of the peer network (PeerNetwork). */
export interface WalletNetwork extends PeerStreams {
  handle (protocol: string, handler: (stream: Stream, peer: { nodeID: string }) => Promise<void>, options: { maxInboundStreams: number }): Promise<void>
  isKnownPeer (nodeID: string): boolean
}

export interface WalletDeps {
  ledger: Ledger
  identity: NodeIdentity
  network: WalletNetwork
  log: Logger
}

export type WalletOptions = TransferOutboxOptions

export interface SendRequest {
  peerID: string
  amountMicro: number
  /** @default '' */
  memo?: string
}

export interface SendResult {
  transactionID: string
  amountMicro: number
  peerID: string
  balanceMicro: number
}

interface InferencePayment {
  peerID: string
  modelID: string
  /** The price the peer advertised in its signed capability record. */
  pricePer1kMicro: number
  /** Tokens the peer actually generated (its reported usage). */
  completionTokens: number
}

/** A paid request about to go to peers, as the router describes it, once for all the peers it may try. */
export interface InferenceChargeRequest {
  modelID: string
  /** The highest price among the peers the request may go to: what is held covers whichever of them answers. */
  pricePer1kTokensMicro: number
  /** The request's `max_tokens`; null when it has none. */
  maxTokens: number | null
}

/** The peer that answered a paid request, at the price its signed capability record advertised. */
export interface InferencePayee {
  peerID: string
  pricePer1kTokensMicro: number
}

/** The credits of one paid request: settled with the answering peer's reported usage, or released when nothing is owed. */
export interface InferenceCharge {
  /** Pays `payee` for the tokens it reported (`billableTokens` of its usage). */
  settle (payee: InferencePayee, tokens: number): WalletTransaction | null
  release (): void
}

/**
 * Credits held for a paid request in flight, so that concurrent requests and sends cannot spend them meanwhile.
 * Held in memory only: a crash before paying simply frees them, since nothing was paid yet.
 */
export interface CreditHold {
  readonly amountMicro: number
  /** Frees the held credits. Idempotent. */
  release (): void
}

/**
 * The node's wallet: sends and inference payments become signed transfers,
 * debited at once and delivered by the outbox until the payee acknowledges; transfers from peers are verified and
 * credited at most once. Amounts are integer micro-credits throughout.
 */
export class Wallet {
  readonly #ledger: Ledger
  readonly #identity: NodeIdentity
  readonly #network: WalletNetwork
  readonly #log: Logger
  readonly #outbox: TransferOutbox
  #heldMicro = 0

  constructor (deps: WalletDeps, options: WalletOptions = {}) {
    this.#ledger = deps.ledger
    this.#identity = deps.identity
    this.#network = deps.network
    this.#log = deps.log
    this.#outbox = new TransferOutbox({
      ledger: deps.ledger,
      nodeID: deps.identity.nodeID,
      log: deps.log,
      deliver: async (peerID, envelopes, { signal }) => await deliverTransfers(this.#network, peerID, envelopes, { signal })
    }, options)
  }

  /** Accepts transfers from peers and resumes delivering ours, including those pending from before a restart. */
  async start (): Promise<void> {
    await this.#network.handle(TRANSFER_PROTOCOL, createTransferHandler({
      identity: this.#identity,
      receive: (transfers) => this.#receive(transfers),
      log: this.#log
    }), TRANSFER_HANDLER_OPTIONS)
    this.#outbox.start()
  }

  async stop (): Promise<void> {
    await this.#outbox.stop()
  }

  /**
   * A peer came online (it entered the peer table): deliver what we owe it now instead of after its backoff. Only
   * this and the outbox's own backoff send a transfer again; a peer's record changing does not.
   */
  peerOnline (peerID: string): void {
    this.#outbox.peerOnline(peerID)
  }

  balanceMicro (): number {
    return this.#ledger.balanceMicro()
  }

  /** Balance less the credits held for paid requests in flight. */
  availableMicro (): number {
    return Math.max(0, this.#ledger.balanceMicro() - this.#heldMicro)
  }

  summary (): WalletTotals {
    return this.#ledger.totals()
  }

  /** Newest first; `limit` 1 to 500, after skipping the `offset` newest (pages, an addition). */
  transactions (limit: number, offset = 0): WalletTransaction[] {
    checkPage(limit, offset)
    return this.#ledger.transactions(limit, offset)
  }

  /**
   * Sends and payments debited here that their payee has not acknowledged, oldest first, each with the payee and why
   * its last delivery failed: a transfer stranded by an unreachable payee is seen here, and goes out again when that
   * payee comes back online. Same `limit` and `offset` as `transactions`.
   */
  pendingTransfers (limit: number, offset = 0): PendingTransfer[] {
    checkPage(limit, offset)
    return this.#ledger.pendingTransfers(limit, offset)
  }

  /**
   * Sends credits to a known peer: debited now (402 when the available balance does not cover it), delivered as a
   * signed transfer until the peer acknowledges it, never refunded.
   */
  send (request: SendRequest): SendResult {
    const { peerID, amountMicro } = request
    const memo = request.memo ?? ''
    if (!Number.isSafeInteger(amountMicro) || amountMicro <= 0 || amountMicro > MAX_TRANSFER_MICRO) {
      throw new InvalidInputError(`amount must be more than 0 and at most ${formatCredits(MAX_TRANSFER_MICRO)} credits`, 'amount')
    }
    if (memo.length > MAX_TRANSFER_MEMO_CHARS) throw new InvalidInputError(`memo must be at most ${MAX_TRANSFER_MEMO_CHARS} characters`, 'memo')
    const transfer = this.#transfer(this.#payee(peerID), amountMicro, memo)
    const { balanceMicro } = this.#ledger.send(transfer, { heldMicro: this.#heldMicro })
    this.#outbox.kick(peerID)
    return { transactionID: transfer.id, amountMicro, peerID, balanceMicro }
  }

  /**
   * Holds `amountMicro` (the most a paid request can cost: price × max tokens) before the request goes out, so a
   * requester that cannot pay gets InsufficientCreditsError before any work starts.
   */
  hold (amountMicro: number): CreditHold {
    if (!Number.isSafeInteger(amountMicro) || amountMicro < 0) throw new RangeError(`Invalid amount to hold: ${amountMicro}`)
    const available = this.availableMicro()
    if (amountMicro > available) {
      throw new InsufficientCreditsError(`Insufficient credits: this request may cost up to ${formatCredits(amountMicro)}, ` +
        `${formatCredits(available)} available`)
    }
    this.#heldMicro += amountMicro
    let open = true
    return {
      amountMicro,
      release: () => {
        if (!open) return
        open = false
        this.#heldMicro -= amountMicro
      }
    }
  }

  /**
   * Holds the most a paid request may cost (the highest price among the peers it may go to × `maxTokens`, or ×
   * DEFAULT_HOLD_TOKENS without one) once, before it goes out: InsufficientCreditsError (402) when the available
   * balance does not cover it, before any peer works. `settle` pays the peer that answered `ceil(its price ×
   * completionTokens / 1000)`, at most its cost of `maxTokens` (a peer is not paid for tokens it was not asked for) and
   * at most what the balance holds (a request without `maxTokens` may outrun its hold).
   */
  openInferenceCharge (request: InferenceChargeRequest): InferenceCharge {
    const { modelID, pricePer1kTokensMicro, maxTokens } = request
    const hold = this.hold(inferenceCostMicro(pricePer1kTokensMicro, maxTokens ?? DEFAULT_HOLD_TOKENS))
    return {
      settle: (payee, tokens) => {
        hold.release()
        const pricePer1kMicro = payee.pricePer1kTokensMicro
        const capMicro = maxTokens == null ? null : inferenceCostMicro(pricePer1kMicro, maxTokens)
        return this.#pay({ peerID: payee.peerID, modelID, pricePer1kMicro, completionTokens: tokens }, { capMicro, upToBalance: true })
      },
      release: () => { hold.release() }
    }
  }

  #pay (payment: InferencePayment, options: { capMicro: number | null, upToBalance: boolean }): WalletTransaction | null {
    const full = inferenceCostMicro(payment.pricePer1kMicro, payment.completionTokens)
    // A peer is paid for at most the tokens we asked for: what it generated beyond them was not agreed.
    const agreed = options.capMicro == null ? full : Math.min(full, options.capMicro)
    // No await between this read and the debit below: nothing else can spend meanwhile.
    const amountMicro = options.upToBalance ? Math.min(agreed, this.availableMicro()) : agreed
    if (amountMicro === 0) return null
    if (payment.peerID === this.#identity.nodeID) throw new InvalidInputError('A node does not pay itself', 'peerID')
    const transfer = this.#transfer(parseNodeID(payment.peerID, 'peerID'), Math.min(amountMicro, MAX_TRANSFER_MICRO), `inference: ${payment.modelID}`.slice(0, MAX_TRANSFER_MEMO_CHARS))
    const { transaction } = this.#ledger.send(transfer, { heldMicro: this.#heldMicro })
    this.#outbox.kick(payment.peerID)
    if (amountMicro < full) this.#log.warn({ peerID: payment.peerID, owedMicro: full, paidMicro: amountMicro }, 'paid less than the tokens generated cost: more than was asked for, or more than the balance holds')
    return transaction
  }

  #payee (peerID: string): NodeID {
    const payee = parseNodeID(peerID, 'peerID')
    if (peerID === this.#identity.nodeID) throw new InvalidInputError('Cannot send credits to this node itself', 'peerID')
    if (!this.#network.isKnownPeer(peerID)) throw new NotFoundError(`Peer not found: ${peerID}`)
    return payee
  }

  #transfer (peerID: NodeID, amountMicro: number, memo: string): TransferRecord {
    const body: Transfer = { id: randomUUID(), from: this.#identity.nodeID, to: peerID, amountMicro, memo, createdAt: new Date().toISOString() }
    const { signature } = signTransfer(this.#identity, body)
    return { id: body.id, peerID, amountMicro, memo, createdAt: body.createdAt, signature }
  }

  #receive (transfers: ReadonlyArray<{ transfer: Transfer, signature: string }>): ReceiveOutcome[] {
    const results = this.#ledger.receiveAll(transfers.map(({ transfer, signature }) => ({
      id: transfer.id, peerID: transfer.from, amountMicro: transfer.amountMicro, memo: transfer.memo, createdAt: transfer.createdAt, signature
    })))
    return results.map((result, i) => {
      const { transfer } = transfers[i]
      if (result === 'conflict') return new ProtocolError(`Transfer id ${transfer.id} is already used by another transfer`, 'refused')
      if (result === 'over_limit') return new ProtocolError(`Transfer ${transfer.id} would take the balance past its limit`, 'refused')
      if (result === 'applied') this.#log.info({ peerID: transfer.from, transferID: transfer.id, amountMicro: transfer.amountMicro }, 'credits received')
      return result
    })
  }
}

/** A page of a list: `limit` 1 to 500, after skipping `offset`. */
function checkPage (limit: number, offset: number): void {
  if (!Number.isInteger(limit) || limit < 1 || limit > 500) throw new InvalidInputError(`limit must be an integer from 1 to 500, not ${limit}`, 'limit')
  if (!Number.isSafeInteger(offset) || offset < 0) throw new InvalidInputError(`offset must be a whole number from 0, not ${offset}`, 'offset')
}
