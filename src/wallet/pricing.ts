// The price a serving node asks per 1,000 generated tokens. Generating one token reads every weight of
// the model once (token generation is memory-bound), so the energy of a token grows with the bytes of the weights,
// which is the model's parameter count times the bits per weight of its quantization. That energy, priced at the
// node's own `electricity_cost` and `electricity_margin`, is the price; docs/API.md, Wallet states the formula.

import { MICRO_PER_CREDIT } from './credits.ts'

/** Energy to generate one token per GB of weights: ~30 W laptops to ~150 W desktops at their token rates. */
export const JOULES_PER_TOKEN_PER_GB = 2
/** One credit is worth one hundredth of the node's electricity currency unit (a cent of USD, EUR, ...). */
export const CREDITS_PER_CURRENCY_UNIT = 100
/** Serving is never free: at least one micro-credit per 1k tokens, even at an electricity cost of 0. */
export const MIN_PRICE_PER_1K_MICRO = 1
/** At most 10^6 credits per 1k tokens, whatever the settings say; keeps price × tokens exact in integers. */
export const MAX_PRICE_PER_1K_MICRO = 1_000_000_000_000
/** Weights assumed for a model that states neither its size nor its parameter count. */
const FALLBACK_WEIGHT_BYTES = 1_000_000_000
const JOULES_PER_KWH = 3_600_000

/** Bits per weight of the common GGUF quantizations, llama.cpp's own figures rounded (for models without a size). */
const BITS_PER_WEIGHT: Readonly<Record<string, number>> = {
  F32: 32, F16: 16, BF16: 16, Q8_0: 8.5, Q8_K: 8.5, Q6_K: 6.56, Q5_1: 6, Q5_K_M: 5.69, Q5_K_S: 5.54, Q5_0: 5.5,
  Q4_1: 5, Q4_K_M: 4.85, Q4_K_S: 4.58, Q4_0: 4.5, IQ4_NL: 4.5, IQ4_XS: 4.25, Q3_K_L: 4.27, Q3_K_M: 3.91,
  Q3_K_S: 3.5, IQ3_M: 3.66, IQ3_XXS: 3.06, Q2_K: 2.63, IQ2_M: 2.7, IQ2_XS: 2.31, IQ2_XXS: 2.06, IQ1_M: 1.75, IQ1_S: 1.56
}
const DEFAULT_BITS_PER_WEIGHT = 8

/** What pricing needs of a model record. */
export interface PricedModel {
  sizeBytes: number | null
  /** e.g. `Q4_K_M`; case-insensitive. */
  quantization: string | null
  /** e.g. `135M`, `7B`, `8x7B`, or a count. */
  parameters: string | number | null
}

export interface ElectricitySettings {
  electricity_cost: number
  electricity_margin: number
}

/**
 * Price per 1,000 generated tokens, in integer micro-credits:
 * `ceil(weightGB × 2 J × 1000 / 3.6e6 J/kWh × electricity_cost × electricity_margin × 100 × 10^6)`, clamped to
 * [1, 10^12]. `weightGB` is `sizeBytes / 10^9`, or `parameters × bitsPerWeight(quantization) / 8 / 10^9` when the size
 * is unknown (1 GB when both are).
 */
export function pricePer1kTokensMicro (model: PricedModel, settings: ElectricitySettings): number {
  const weightGB = weightBytes(model) / 1e9
  const kWhPer1k = weightGB * JOULES_PER_TOKEN_PER_GB * 1000 / JOULES_PER_KWH
  const credits = kWhPer1k * settings.electricity_cost * settings.electricity_margin * CREDITS_PER_CURRENCY_UNIT
  // The epsilon keeps a price that is exactly an integer of micro-credits from rounding up on float noise.
  const micro = Math.ceil(credits * MICRO_PER_CREDIT - 1e-6)
  if (!Number.isFinite(micro)) return MAX_PRICE_PER_1K_MICRO
  return Math.min(MAX_PRICE_PER_1K_MICRO, Math.max(MIN_PRICE_PER_1K_MICRO, micro))
}

/**
 * What `tokens` generated tokens cost at `pricePer1kMicro`: `ceil(price × tokens / 1000)` micro-credits. Rounded up,
 * once per request, so a request is never free and is never over-charged by more than one micro-credit.
 */
export function inferenceCostMicro (pricePer1kMicro: number, tokens: number): number {
  if (!Number.isSafeInteger(pricePer1kMicro) || pricePer1kMicro < 0) throw new RangeError(`Invalid price per 1k tokens: ${pricePer1kMicro}`)
  if (!Number.isSafeInteger(tokens) || tokens < 0) throw new RangeError(`Invalid token count: ${tokens}`)
  // BigInt: price × tokens can pass 2^53 before the division brings it back.
  return Number((BigInt(pricePer1kMicro) * BigInt(tokens) + 999n) / 1000n)
}

function weightBytes (model: PricedModel): number {
  if (model.sizeBytes != null && Number.isFinite(model.sizeBytes) && model.sizeBytes > 0) return model.sizeBytes
  const parameters = parameterCount(model.parameters)
  if (parameters == null) return FALLBACK_WEIGHT_BYTES
  const bits = BITS_PER_WEIGHT[(model.quantization ?? '').toUpperCase()] ?? DEFAULT_BITS_PER_WEIGHT
  return parameters * bits / 8
}

/** `135M` → 1.35e8, `1.5B` → 1.5e9, `8x7B` → 5.6e10; null when it is not a count we can read. */
export function parameterCount (parameters: string | number | null): number | null {
  if (typeof parameters === 'number') return Number.isFinite(parameters) && parameters > 0 ? parameters : null
  if (parameters == null) return null
  const match = /^\s*(?:(\d+)\s*x\s*)?(\d+(?:\.\d+)?)\s*([KMBT])?\s*$/i.exec(parameters)
  if (match == null) return null
  const scale = { K: 1e3, M: 1e6, B: 1e9, T: 1e12 }[(match[3] ?? '').toUpperCase() as 'K' | 'M' | 'B' | 'T'] ?? 1
  return (match[1] == null ? 1 : Number(match[1])) * Number(match[2]) * scale
}

/**
 * The tokens a request is billed for: those the model generated; for embeddings, which generate none, the tokens
 * of the input it read. The serving node counts the same (metrics) as the requester pays for.
 */
export function billableTokens (kind: string, usage: { promptTokens: number, completionTokens: number }): number {
  return kind === 'embeddings' ? usage.promptTokens : usage.completionTokens
}
