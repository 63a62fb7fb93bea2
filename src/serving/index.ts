// What other layers use of the serving policy: the one door from peers to the engine.
export { ServingPolicy, NotServedError, ReservedCapacityError, publicSlots } from './serving-policy.ts'
export type { ServingPolicyDeps, PeerGeneration } from './serving-policy.ts'
