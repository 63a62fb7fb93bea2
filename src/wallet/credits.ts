// Credits are integer micro-credits everywhere behind the HTTP edge; the edge, and messages for people,
// convert with these and nothing else.

export const MICRO_PER_CREDIT = 1_000_000

/** The nearest whole number of micro-credits to `credits`. */
export function creditsToMicro (credits: number): number {
  return Math.round(credits * MICRO_PER_CREDIT)
}

export function microToCredits (micro: number): number {
  return micro / MICRO_PER_CREDIT
}

/** `micro` as a decimal number of credits for messages: `1.5`, `0.000001`, `100`. */
export function formatCredits (micro: number): string {
  return (micro / MICRO_PER_CREDIT).toFixed(6).replace(/\.?0+$/, '')
}
