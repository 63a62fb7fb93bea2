/** The growth of one retry delay: from `minMs`, doubled per failure, capped at `maxMs`. */
export interface BackoffOptions {
  minMs: number
  maxMs: number
}

/**
 * The delay before the `failures`-th retry (1 for the first): `minMs × 2^(failures − 1)`, capped at `maxMs`, times a
 * random factor in [0.5, 1]. The jitter spreads out the nodes that failed together (a relay restart, a hub outage),
 * so that they do not all come back in the same instant. The one retry schedule of downloads, WAN reconnects and the
 * transfer outbox.
 */
export function backoffDelayMs (failures: number, options: BackoffOptions, random: () => number = Math.random): number {
  const exponent = Math.min(Math.max(failures, 1) - 1, 30)
  const capped = Math.min(options.maxMs, options.minMs * 2 ** exponent)
  return Math.round(capped * (0.5 + random() * 0.5))
}
