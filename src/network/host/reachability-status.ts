// What the HTTP API says of the node's reachability, apart from the monitor that finds it out (reachability.ts), so
// that the API's schemas can name it without loading the libp2p parts the monitor needs.

/** What a node knows of its reachability: 'public' once a peer has dialed one of its public addresses back, 'private'
 *  once a dial-back to its public address failed (behind NAT, no port forward), 'unknown' before either (or with nothing
 *  to test: a node listening on loopback only, or that no public peer has told its public IP). */
export const REACHABILITY = ['public', 'private', 'unknown'] as const
export type Reachability = typeof REACHABILITY[number]

export interface ReachabilityStatus {
  reachability: Reachability
  /** Our public addresses that a peer has dialed back (confirmed by AutoNAT), without our peer id. */
  publicAddrs: string[]
}
