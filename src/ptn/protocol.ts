import type { Stream } from '@libp2p/interface'
import type { Logger } from 'pino'
import { z } from 'zod'
import { UnavailableError, errorText } from '../errors.ts'
import { HEX_32_BYTES, type NodeIdentity } from '../identity/index.ts'
import { ProtocolError, SignedEnvelope, openEnvelope, requestPeer, serveRequest, signEnvelope, type PeerStreams } from '../wire/index.ts'
import { HexKey, MAX_CERT_CHARS } from './certificates.ts'
import { MAX_INVITE_CHARS } from './invites.ts'

// The PTN protocol: one request per stream, one answer, both signed envelopes by the two node keys. The connection is
// Noise-encrypted and its remote peer id *is* the remote node key, so the handler knows for certain who is asking
// (a joiner proves its identity just by being the connection's remote peer) and a CA key sent here is seen by the
// target alone. The envelope signatures add that each message was made for this protocol by that node.
export const PTN_PROTOCOL = '/meshnode/ptn/1.0.0'   // new version on any wire change
/** A request or answer holds one certificate or invite code and a key: a few KiB at most. */
export const MAX_PTN_FRAME_BYTES = 16 * 1024
/** Deadline for the request frame at the handler, and for the whole exchange at the requester. */
export const PTN_TIMEOUT_MS = 10_000
export const MAX_INBOUND_PTN_STREAMS = 4

const CertData = z.string().min(1).max(MAX_CERT_CHARS)
const CaKeyHex = z.string().regex(HEX_32_BYTES)

export const PtnRequest = z.discriminatedUnion('type', [
  /** Redeem an invite made by the node asked; the answer is a certificate for the asking node. */
  z.object({ type: z.literal('join-request'), ptnID: HexKey, inviteCode: z.string().min(1).max(MAX_INVITE_CHARS) }),
  /** Make the node asked an admin: its admin certificate and the CA key (hex seed), over this encrypted stream only. */
  z.object({ type: z.literal('promote'), ptnID: HexKey, certData: CertData, caKeyHex: CaKeyHex }),
  /** The asking node has left the PTN. */
  z.object({ type: z.literal('leave-notice'), ptnID: HexKey }),
  /** Re-issue the asking node's certificate; `certData` is what survives of its old one (it may have expired). */
  z.object({ type: z.literal('recover-request'), ptnID: HexKey, certData: CertData.nullable() })
])
export type PtnRequest = z.infer<typeof PtnRequest>

/**
 * Why a request was not honoured: `invite_invalid` (malformed, forged or expired), `invite_used`, `not_admin` (the
 * node asked is not an admin of that PTN holding its CA key), `not_member` (the node asked, or the asking node, is not
 * a member), `cert_invalid`, `key_mismatch` (a CA key that is not the PTN's).
 */
export const REFUSAL_REASONS = ['invite_invalid', 'invite_used', 'not_admin', 'not_member', 'cert_invalid', 'key_mismatch'] as const
export type RefusalReason = typeof REFUSAL_REASONS[number]

export const PtnReply = z.discriminatedUnion('type', [
  /** A certificate for the asking node; an admin's re-issued on recover comes with the CA key it needs to act. */
  z.object({ type: z.literal('cert'), certData: CertData, caKeyHex: CaKeyHex.optional() }),
  z.object({ type: z.literal('ok') }),
  z.object({ type: z.literal('refused'), reason: z.enum(REFUSAL_REASONS), message: z.string().max(1000) })
])
export type PtnReply = z.infer<typeof PtnReply>

/** What the PTN service needs of the peer network (`PeerNetwork` has it). */
export interface PtnPeers extends PeerStreams {
  /** Registers the PTN protocol; the handler gets the stream and the authenticated nodeID of the remote peer. */
  handle (protocol: string, handler: (stream: Stream, peer: { readonly nodeID: string }) => Promise<void>, options: { maxInboundStreams: number }): Promise<void>
  /** Whether the network currently knows how to reach the peer. */
  isKnownPeer (nodeID: string): boolean
  /** The connected peers with the PTN certificates their latest capability records present, and the PTNs they prove. */
  peers (): ReadonlyArray<{ readonly nodeID: string, readonly record: { readonly ptnCertificates: readonly string[] }, readonly ptnIDs: readonly string[] }>
}

/**
 * Sends one request to `nodeID` and returns its signed answer. Any failure to reach the peer or to get a valid answer
 * from it in time is an `UnavailableError` (a 503 at the HTTP edge: the peer is unreachable); a refusal is an answer.
 */
export async function askPtnPeer (peers: PtnPeers, identity: NodeIdentity, nodeID: string, request: PtnRequest, options: { signal?: AbortSignal, timeoutMs?: number } = {}): Promise<PtnReply> {
  const timeoutMs = options.timeoutMs ?? PTN_TIMEOUT_MS
  const deadline = AbortSignal.timeout(timeoutMs)
  const signal = options.signal == null ? deadline : AbortSignal.any([deadline, options.signal])
  try {
    const envelope = await requestPeer(peers, nodeID, PTN_PROTOCOL, signEnvelope(identity, request, { domain: PTN_PROTOCOL }), SignedEnvelope,
      { signal, openTimeoutMs: timeoutMs, timeoutMs: null, maxRequestBytes: MAX_PTN_FRAME_BYTES, maxAnswerBytes: MAX_PTN_FRAME_BYTES })
    return openEnvelope(envelope, PtnReply, { domain: PTN_PROTOCOL, expectedSigner: nodeID })
  } catch (err) {
    if (options.signal?.aborted === true) throw options.signal.reason
    if (err instanceof UnavailableError) throw err
    // Never the request in the message: a promote request holds the CA key.
    const why = deadline.aborted ? `no answer within ${timeoutMs} ms` : errorText(err)
    throw new UnavailableError(`Node ${nodeID} did not answer the PTN request: ${why}`, { cause: err })
  }
}

/**
 * Serves one PTN stream: reads the signed request of `remoteNodeID`, lets `answer` decide, sends the signed answer.
 * A broken or hostile request costs its sender the stream and is logged without its content.
 */
export async function servePtnStream (stream: Stream, remoteNodeID: string, deps: { identity: NodeIdentity, log: Logger, answer: (request: PtnRequest, remoteNodeID: string) => PtnReply }): Promise<void> {
  try {
    await serveRequest(stream, SignedEnvelope, (envelope) => {
      const request = openEnvelope(envelope, PtnRequest, { domain: PTN_PROTOCOL, expectedSigner: remoteNodeID })
      const reply = deps.answer(request, remoteNodeID)
      deps.log.info({ peer: remoteNodeID, type: request.type, ptnID: request.ptnID, answer: reply.type, reason: reply.type === 'refused' ? reply.reason : undefined }, 'PTN request answered')
      return signEnvelope(deps.identity, reply, { domain: PTN_PROTOCOL })
    }, { maxRequestBytes: MAX_PTN_FRAME_BYTES, timeoutMs: PTN_TIMEOUT_MS })
  } catch (err) {
    const reason = err instanceof ProtocolError ? { code: err.code, message: err.message } : { err }
    deps.log.warn({ peer: remoteNodeID, ...reason }, 'PTN stream refused or failed')
    stream.abort(err instanceof Error ? err : new Error(String(err)))
  }
}
