// The wire: how nodes speak to each other, below every protocol. Length-prefixed JSON frames with limits and
// deadlines, one signed-envelope format over one canonical JSON, one request/response shape, one retry schedule.
// Every protocol (src/network, src/wallet, src/ptn, src/agent) is written with these and nothing else.
export { canonicalJson } from './canonical-json.ts'
export { ProtocolError, isHostile } from './errors.ts'
export type { ProtocolErrorCode } from './errors.ts'
export { openFrames, readMessage, writeMessage, parseWith, firstOrTimeout, DEFAULT_MAX_FRAME_BYTES, DEFAULT_READ_TIMEOUT_MS, DEFAULT_WRITE_TIMEOUT_MS } from './frames.ts'
export type { FrameStream, FrameStreamOptions, ReadMessageOptions, WriteMessageOptions } from './frames.ts'
export { SignedEnvelope, ENVELOPE_SIGNATURE, signEnvelope, openEnvelope, reopenEnvelope, signCanonical, verifyCanonical } from './envelope.ts'
export type { EnvelopeOptions, OpenEnvelopeOptions } from './envelope.ts'
export {
  openPeerStream, askOnStream, requestOnStream, askPeer, requestPeer, serveRequest, readRequest, DEFAULT_OPEN_TIMEOUT_MS
} from './exchange.ts'
export type { PeerStreams, OpenOptions, AnswerOptions, AskOptions, ServeOptions } from './exchange.ts'
export {
  MAX_JSON_DEPTH, MAX_MESSAGE_DEPTH, JsonValue, JsonObject, JsonText, jsonDepthExceeds, jsonTextDepthExceeds, jsonProblem, jsonSize, nestedTooDeep
} from './json-depth.ts'
export { backoffDelayMs } from './backoff.ts'
export type { BackoffOptions } from './backoff.ts'
export { batchesWithKeepAlives } from './keep-alive.ts'
export type { KeepAliveOptions } from './keep-alive.ts'
