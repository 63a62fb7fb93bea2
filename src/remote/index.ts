// Inference on peers, what other layers use of it: the router that places a request on this node or the best peer
// (with failover before the first token), and the infer protocol both ways, whose serving side hands each request to
// the serving policy.
export { PeerRouter } from './router.ts'
export type { PeerRouterDeps, PeerRouterOptions, RouterNetwork, InferenceBilling } from './router.ts'
export { createInferHandler, INFER_PROTOCOL, INFER_PROTOCOL_CHAT, INFER_PROTOCOL_REASONING, MAX_INBOUND_INFER_STREAMS, RemoteInferenceError } from './infer.ts'
export type { InferHandlerDeps, InferHandlerOptions } from './infer.ts'
