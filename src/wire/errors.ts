/**
 * Why a peer's frame or request was not accepted. The receiving side throws it; the caller aborts the stream, so a
 * hostile or broken peer costs itself one stream and never the node.
 * - `too_large`: a frame over the protocol's limit (refused before its body is buffered)
 * - `malformed`: not UTF-8 JSON, JSON nested deeper than MAX_MESSAGE_DEPTH, or a bad length prefix
 * - `invalid`: JSON of the wrong shape for its schema
 * - `bad_signature`: a signed envelope whose signature does not verify
 * - `wrong_signer`: a valid signature, by another key than the one the protocol requires
 * - `timeout`: no complete frame within the read deadline, or the peer took none of ours within the write deadline
 * - `eof`: the stream ended before a complete frame arrived (a protocol that streams must send an explicit last frame,
 *   because a relay cutting a connection at its data limit looks exactly like an orderly end)
 * - `refused`: the remote understood the request and answered that it will not do it
 */
export type ProtocolErrorCode = 'too_large' | 'malformed' | 'invalid' | 'bad_signature' | 'wrong_signer' | 'timeout' | 'eof' | 'refused'

export class ProtocolError extends Error {
  override name = 'ProtocolError'
  readonly code: ProtocolErrorCode
  constructor (message: string, code: ProtocolErrorCode, options?: { cause?: unknown }) {
    super(message, options)
    this.code = code
  }
}

// Codes that only a broken or hostile peer causes; a timeout or a cut stream can be the network's.
const HOSTILE_CODES: ReadonlySet<ProtocolErrorCode> = new Set<ProtocolErrorCode>(['too_large', 'malformed', 'invalid', 'bad_signature', 'wrong_signer'])

/** Whether `err` says the peer sent a malformed, oversized or forged message: what costs it its connection and a ban. */
export function isHostile (err: unknown): err is ProtocolError {
  return err instanceof ProtocolError && HOSTILE_CODES.has(err.code)
}
