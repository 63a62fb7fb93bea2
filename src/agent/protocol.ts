import type { Stream } from '@libp2p/interface'
import { z } from 'zod'
import { NodeID, type NodeIdentity } from '../identity/index.ts'
import { ProtocolError, SignedEnvelope, askPeer, openEnvelope, readRequest, signEnvelope, type FrameStream, type PeerStreams } from '../wire/index.ts'

// Agent-to-agent messages. One stream carries one exchange: the sender writes its message
// as an envelope signed by its node key and half-closes; the receiving agent answers with its loaded model and writes
// keep-alive frames while it works, then exactly one last frame: `answer` (the answer, signed by the receiver, in
// the same conversation) or `error`. Ending without a last frame is a failure, as a relay cutting the connection
// looks exactly like an orderly end. Closing or resetting the stream cancels the answer. The conversation id is
// chosen by whoever starts the conversation, so both nodes file the exchange under the same id.
export const AGENT_PROTOCOL = '/meshnode/agent/1.0.0'   // new version on any wire change
/** Largest message content, in UTF-8 bytes (over 32 KiB is refused, a 413 at the HTTP edge). */
export const MAX_AGENT_MESSAGE_BYTES = 32 * 1024
/**
 * Largest frame: a 32 KiB message JSON-escapes to at most 6 bytes a byte (control characters as \u00XX), with room
 * for the other fields and the signature.
 */
export const MAX_AGENT_FRAME_BYTES = 256 * 1024
export const MAX_AGENT_NAME_CHARS = 128
export const MAX_AGENT_CAPABILITIES = 32
export const MAX_AGENT_CAPABILITY_CHARS = 64
/** Deadline for the message frame at the receiver. */
export const AGENT_REQUEST_TIMEOUT_MS = 10_000
/** The receiver sends a keep-alive frame when it has sent nothing for this long (waiting for a slot, generating). */
export const AGENT_KEEPALIVE_MS = 5_000
/** Exchanges one peer may have running on us at once; the engine's slots and queue bound the work anyway. */
export const MAX_INBOUND_AGENT_STREAMS = 4

/** Message content: well-formed text (a lone surrogate could not be stored as signed) of at most 32 KiB. */
export const AgentContent = z.string()
  .refine((text) => text.isWellFormed(), { message: 'must be well-formed Unicode text' })
  .refine((text) => Buffer.byteLength(text, 'utf8') <= MAX_AGENT_MESSAGE_BYTES, { message: `must be at most ${MAX_AGENT_MESSAGE_BYTES} bytes` })

/** What a node signs for every message it sends, a question (`inReplyTo` null) or its agent's answer. */
export const AgentMessage = z.strictObject({
  conversationID: z.uuid(),
  messageID: z.uuid(),
  /** The message this one answers; null for a message that asks. */
  inReplyTo: z.uuid().nullable(),
  from: NodeID,
  /** The sender's agent name, shown as `peerName` on the other side. */
  fromName: z.string().min(1).max(MAX_AGENT_NAME_CHARS),
  to: NodeID,
  content: AgentContent,
  sentAt: z.iso.datetime()
})
export type AgentMessage = z.infer<typeof AgentMessage>

/**
 * Why a receiver did not answer:
 * - `no_model`: its agent has no model loaded
 * - `busy`: every slot is busy and its queue is full
 * - `too_long`: the message does not fit its model's context
 * - `refused`: the message may not be accepted (a conversation of another peer, a message id used before)
 * - `internal`: the generation failed
 */
export const AGENT_ERROR_CODES = ['no_model', 'busy', 'too_long', 'refused', 'internal'] as const
export type AgentErrorCode = typeof AGENT_ERROR_CODES[number]

export const AgentReplyFrame = z.discriminatedUnion('type', [
  z.object({ type: z.literal('keepalive') }),
  z.object({ type: z.literal('answer'), envelope: SignedEnvelope }),
  z.object({ type: z.literal('error'), code: z.enum(AGENT_ERROR_CODES), message: z.string().max(2000) })
])
export type AgentReplyFrame = z.infer<typeof AgentReplyFrame>

/** The receiver said no; `code` says why. */
export class AgentRefusalError extends Error {
  override name = 'AgentRefusalError'
  readonly code: AgentErrorCode
  constructor (code: AgentErrorCode, message: string) {
    super(message)
    this.code = code
  }
}

export function signAgentMessage (identity: NodeIdentity, message: AgentMessage): SignedEnvelope<AgentMessage> {
  if (message.from !== identity.nodeID) throw new Error(`A message from ${message.from} cannot be signed by ${identity.nodeID}`)
  return signEnvelope(identity, AgentMessage.parse(message), { domain: AGENT_PROTOCOL })
}

/**
 * Checks a received envelope and returns its message: signed by `from` for this protocol, `from` is the node at the
 * other end of the connection (nobody can pass another node's message off as their own, or send one in its name),
 * `to` is this node, content within its limit, and a question or an answer as expected. Throws ProtocolError.
 */
export function openAgentMessage (envelope: unknown, expected: { from: string, to: string, inReplyTo: string | null }): AgentMessage {
  // Content over the limit is `too_large` (a 413 for the sender's user), not merely a body of the wrong shape.
  const body = (envelope as { body?: unknown } | null)?.body
  const content = (body as { content?: unknown } | null)?.content
  if (typeof content === 'string' && Buffer.byteLength(content, 'utf8') > MAX_AGENT_MESSAGE_BYTES) {
    throw new ProtocolError(`Agent message content exceeds ${MAX_AGENT_MESSAGE_BYTES} bytes`, 'too_large')
  }
  const message = openEnvelope(envelope, AgentMessage, { domain: AGENT_PROTOCOL, expectedSigner: expected.from })
  if (message.from !== expected.from) throw new ProtocolError(`Message ${message.messageID} is from ${message.from}, but was signed and sent by ${expected.from}`, 'wrong_signer')
  if (message.to !== expected.to) throw new ProtocolError(`Message ${message.messageID} is addressed to ${message.to}, not to this node`, 'invalid')
  if (message.inReplyTo !== expected.inReplyTo) {
    throw new ProtocolError(expected.inReplyTo == null
      ? `Message ${message.messageID} is an answer where a question was expected`
      : `Answer ${message.messageID} replies to ${String(message.inReplyTo)}, not to ${expected.inReplyTo}`, 'invalid')
  }
  return message
}

/** Reads the sender's message frame (the receiver's first step). Throws ProtocolError. */
export async function readAgentRequest (stream: Stream): Promise<{ frames: FrameStream, envelope: SignedEnvelope }> {
  const { frames, request } = await readRequest(stream, SignedEnvelope, { maxRequestBytes: MAX_AGENT_FRAME_BYTES, timeoutMs: AGENT_REQUEST_TIMEOUT_MS })
  return { frames, envelope: request }
}

export interface ExchangeOptions {
  signal?: AbortSignal
  /** Deadline for reaching the peer and opening the stream. */
  openTimeoutMs: number
  /** The sender gives up on a receiver that sent no frame for this long. */
  idleTimeoutMs: number
}

/**
 * The sender's side of one exchange: writes `envelope`, half-closes, and returns the receiver's answer envelope
 * (unchecked: the caller opens it). Throws AgentRefusalError for the receiver's error frame, ProtocolError for a
 * broken answer (the peer is reported), UnavailableError when the peer cannot be reached. The stream is reset on any
 * failure, which cancels the answer at the receiver.
 */
export async function exchangeAgentMessage (peers: PeerStreams, nodeID: string, envelope: SignedEnvelope<AgentMessage>, options: ExchangeOptions): Promise<SignedEnvelope> {
  const frames = askPeer(peers, nodeID, AGENT_PROTOCOL, envelope, AgentReplyFrame, (frame) => frame.type !== 'keepalive', {
    signal: options.signal,
    openTimeoutMs: options.openTimeoutMs,
    timeoutMs: options.idleTimeoutMs,
    maxRequestBytes: MAX_AGENT_FRAME_BYTES,
    maxAnswerBytes: MAX_AGENT_FRAME_BYTES
  })
  for await (const frame of frames) {
    if (frame.type === 'error') throw new AgentRefusalError(frame.code, frame.message)
    if (frame.type === 'answer') return frame.envelope as SignedEnvelope
  }
  throw new ProtocolError('The agent stream ended without an answer', 'eof')
}
