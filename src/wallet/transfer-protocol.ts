import type { Stream } from '@libp2p/interface'
import type { Logger } from 'pino'
import { z } from 'zod'
import { NodeID, type NodeIdentity } from '../identity/index.ts'
import { ProtocolError, openEnvelope, reopenEnvelope, requestPeer, serveRequest, signEnvelope, type PeerStreams, type SignedEnvelope } from '../wire/index.ts'

/**
 * Credit transfers between nodes. The payer signs a transfer and delivers it, again and again
 * until the payee acknowledges it; the payee applies each transfer id at most once and acknowledges every copy.
 * One stream carries one batch: the payer sends `{transfers}` and half-closes, the payee answers `{acks}` in the
 * same order and closes. New version on any wire change.
 */
export const TRANSFER_PROTOCOL = '/meshnode/transfer/1.0.0'
/** Signature domain of a transfer body: a signature made for another protocol never passes as a transfer. */
export const TRANSFER_DOMAIN = 'meshnode/transfer/v1'
/** Largest single transfer: 10^9 credits. Keeps every sum far below 2^53, where JSON numbers stop being exact. */
export const MAX_TRANSFER_MICRO = 1_000_000_000_000_000
export const MAX_TRANSFER_MEMO_CHARS = 256
/** Transfers per frame: a backlog of one peer drains in a few round trips, and a frame stays far below its limit. */
export const MAX_TRANSFERS_PER_FRAME = 50
// 50 envelopes with 256-character memos of 4-byte characters stay under 100 KiB.
const MAX_FRAME_BYTES = 128 * 1024
const MAX_INBOUND_STREAMS = 8
const READ_TIMEOUT_MS = 10_000
/** Deadline for reaching a payee and opening the transfer stream; the outbox retries after it. */
const OPEN_TIMEOUT_MS = 15_000

/** What the payer signs. `amountMicro` is an integer of micro-credits, never a float. */
export const Transfer = z.strictObject({
  id: z.uuid(),
  from: NodeID,
  to: NodeID,
  amountMicro: z.number().int().positive().max(MAX_TRANSFER_MICRO),
  memo: z.string().max(MAX_TRANSFER_MEMO_CHARS),
  createdAt: z.iso.datetime()
})
export type Transfer = z.infer<typeof Transfer>

export const TransferRequest = z.object({
  transfers: z.array(z.unknown()).min(1).max(MAX_TRANSFERS_PER_FRAME)
})

/**
 * - `applied`: credited now
 * - `duplicate`: this transfer id was credited before; nothing changed (a retry or a replay)
 * - `refused`: not credited, with the reason (forged, malformed, not addressed to us, an id reused with other content)
 */
export const TransferAck = z.object({
  id: z.string().nullable(),
  status: z.enum(['applied', 'duplicate', 'refused']),
  reason: z.string().nullable()
})
export type TransferAck = z.infer<typeof TransferAck>

export const TransferResponse = z.object({ acks: z.array(TransferAck).max(MAX_TRANSFERS_PER_FRAME) })

export function signTransfer (identity: NodeIdentity, transfer: Transfer): SignedEnvelope<Transfer> {
  if (transfer.from !== identity.nodeID) throw new Error(`A transfer from ${transfer.from} cannot be signed by ${identity.nodeID}`)
  return signEnvelope(identity, Transfer.parse(transfer), { domain: TRANSFER_DOMAIN })
}

/** What the ledger keeps of a transfer: its signed fields and the signature, each checked before it was stored. */
export interface StoredTransfer {
  id: string
  from: string
  to: string
  amountMicro: number
  memo: string
  createdAt: string
  signature: string
}

/** A stored transfer as it travels again: its envelope rebuilt and checked once more (a damaged row never goes out). */
export function storedEnvelope (stored: StoredTransfer): SignedEnvelope<Transfer> {
  const { signature, ...body } = stored
  return reopenEnvelope({ body, signer: body.from, signature }, Transfer, { domain: TRANSFER_DOMAIN })
}

/**
 * Checks a received envelope: signed by `from`, `from` is the peer at the other end of the connection (so nobody
 * can replay another node's transfer as their own), `to` is us, and never from us to us. Throws ProtocolError.
 */
export function openTransfer (envelope: unknown, expected: { from: string, to: string }): Transfer {
  const transfer = openEnvelope(envelope, Transfer, { domain: TRANSFER_DOMAIN, expectedSigner: expected.from })
  if (transfer.from !== expected.from) throw new ProtocolError(`Transfer ${transfer.id} is from ${transfer.from}, but was signed and sent by ${expected.from}`, 'wrong_signer')
  if (transfer.to !== expected.to) throw new ProtocolError(`Transfer ${transfer.id} is addressed to ${transfer.to}, not to this node`, 'invalid')
  if (transfer.from === transfer.to) throw new ProtocolError(`Transfer ${transfer.id} credits its own sender`, 'invalid')
  return transfer
}

/** What becomes of a verified transfer: applied, a duplicate of one applied before, or why it is refused. */
export type ReceiveOutcome = 'applied' | 'duplicate' | ProtocolError

export interface TransferHandlerDeps {
  identity: NodeIdentity
  /**
   * Applies a batch of verified transfers, each at most once, durably, in one commit before it returns: the
   * acknowledgements go out only after the credits are committed. One outcome per transfer, in order (a ProtocolError
   * `refused` for one it will not apply).
   */
  receive: (transfers: ReadonlyArray<{ transfer: Transfer, signature: string }>) => ReceiveOutcome[]
  log: Logger
}

/**
 * The payee's side, for `PeerNetwork.handle`: every envelope of the batch is checked on its own, so one bad envelope
 * costs only itself. A frame that is not a batch at all throws (ProtocolError): the network aborts the stream and
 * holds the sender to account.
 */
export function createTransferHandler (deps: TransferHandlerDeps) {
  return async (stream: Stream, peer: { nodeID: string }): Promise<void> => {
    await serveRequest(stream, TransferRequest, (request) => ({ acks: receiveBatch(deps, request.transfers, peer.nodeID) }),
      { maxRequestBytes: MAX_FRAME_BYTES, timeoutMs: READ_TIMEOUT_MS })
  }
}

/** Checks each envelope on its own, then applies those that pass together: one ack per envelope, in order. */
function receiveBatch (deps: TransferHandlerDeps, envelopes: unknown[], from: string): TransferAck[] {
  const refused = (id: string | null, err: ProtocolError): TransferAck => {
    deps.log.warn({ peer: from, transferID: id, reason: err.message }, 'transfer refused')
    return { id, status: 'refused', reason: err.message }
  }
  const acks: TransferAck[] = []
  const verified: Array<{ transfer: Transfer, signature: string, at: number }> = []
  for (const envelope of envelopes) {
    try {
      const transfer = openTransfer(envelope, { from, to: deps.identity.nodeID })
      verified.push({ transfer, signature: (envelope as SignedEnvelope).signature, at: acks.length })
      acks.push({ id: transfer.id, status: 'refused', reason: 'not applied' })   // replaced by its outcome below
    } catch (err) {
      // The expected refusals: a ProtocolError from the checks above. Anything else is our fault (a database error,
      // say): the payer gets no ack for the batch and retries later.
      if (!(err instanceof ProtocolError)) throw err
      acks.push(refused(envelopeID(envelope), err))
    }
  }
  const outcomes = verified.length === 0 ? [] : deps.receive(verified)
  verified.forEach(({ transfer, at }, i) => {
    const outcome = outcomes[i]
    acks[at] = outcome instanceof ProtocolError ? refused(transfer.id, outcome) : { id: transfer.id, status: outcome, reason: null }
  })
  return acks
}

function envelopeID (envelope: unknown): string | null {
  const body = (envelope as { body?: { id?: unknown } } | null)?.body
  return typeof body?.id === 'string' ? body.id.slice(0, 64) : null
}

/**
 * The payer's side: sends one batch to `nodeID` and returns one ack per envelope, in order. Throws (ProtocolError,
 * UnavailableError or the stream's error) when the batch was not acknowledged as a whole; then any of it may or may
 * not have been applied, which is why the payer simply sends it again.
 */
export async function deliverTransfers (peers: PeerStreams, nodeID: string, envelopes: SignedEnvelope[], options: { signal?: AbortSignal } = {}): Promise<TransferAck[]> {
  if (envelopes.length === 0 || envelopes.length > MAX_TRANSFERS_PER_FRAME) {
    throw new RangeError(`A batch holds 1 to ${MAX_TRANSFERS_PER_FRAME} transfers, not ${envelopes.length}`)
  }
  const { acks } = await requestPeer(peers, nodeID, TRANSFER_PROTOCOL, { transfers: envelopes }, TransferResponse, {
    signal: options.signal, openTimeoutMs: OPEN_TIMEOUT_MS, timeoutMs: READ_TIMEOUT_MS, maxRequestBytes: MAX_FRAME_BYTES, maxAnswerBytes: MAX_FRAME_BYTES
  })
  if (acks.length !== envelopes.length) throw new ProtocolError(`Expected ${envelopes.length} acks, got ${acks.length}`, 'invalid')
  return acks
}

export const TRANSFER_HANDLER_OPTIONS = { maxInboundStreams: MAX_INBOUND_STREAMS } as const
