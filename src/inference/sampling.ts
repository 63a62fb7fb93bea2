import { randomInt } from 'node:crypto'
import type { LlamaModel, LLamaChatGenerateResponseOptions, Token, TokenBias } from 'node-llama-cpp'
import type { SamplingRequest } from './chat.ts'
import { InvalidGenerationRequestError } from './errors.ts'
import { llamaModule } from './llama.ts'

// One reading of the sampling parameters for every kind of generation (chat, text completion): the same ranges,
// defaults and refusals, turned into node-llama-cpp's terms.

const DEFAULT_TEMPERATURE = 1 // OpenAI's documented default; node-llama-cpp's own default (0) would be greedy
/** Stop strings one request may give: OpenAI's limit, and the same at the HTTP edge, on the wire and in the engine. */
export const MAX_STOP_STRINGS = 4
/** Longest stop string, in UTF-16 code units: far beyond any real one, short enough to match cheaply. */
export const MAX_STOP_STRING_CHARS = 1024
/**
 * Temperatures below this sample greedily. Logits divided by a temperature near 1e-38 overflow float32 to infinity,
 * the softmax turns to NaN and llama.cpp picks a token the grammar forbids (the request that used to crash the node); a temperature
 * this small is greedy in all but name anyway.
 */
const GREEDY_BELOW_TEMPERATURE = 1e-3
const SEED_RANGE = 0xFFFFFFFF // seeds 0 .. 2^32 - 2; llama.cpp's LLAMA_DEFAULT_SEED (2^32 - 1) means "pick one at random"
/** OpenAI's logit_bias range; at the ends a token is banned or all but forced. */
export const MAX_LOGIT_BIAS = 100
/** Most entries in one logit_bias map (OpenAI allows 300; a larger map only costs sampling time). */
export const MAX_LOGIT_BIAS_ENTRIES = 1024

/**
 * top_k when a request gives none: 40, llama-server's and Ollama's default, and what node-llama-cpp applies to an option
 * left out. `top_k: 0` samples from every token: node-llama-cpp then sorts the whole vocabulary before each sample
 * (nearly doubling a small model's CPU time per token, bench/README.md), which our own token loop spares
 * (token-loop.ts: no top-k stage at all, the same distribution).
 */
export const DEFAULT_TOP_K = 40

export type Sampling = Pick<LLamaChatGenerateResponseOptions,
  'temperature' | 'topP' | 'topK' | 'seed' | 'repeatPenalty' | 'customStopTriggers' | 'tokenBias'>

/**
 * Checks the sampling parameters and resolves them against the model. `room` is how many tokens the context has
 * left after the prompt: maxTokens is capped at it, not refused (a client asking for 4096 tokens from a 2048-token
 * context gets finish_reason "length").
 */
export async function planSampling (request: SamplingRequest, model: LlamaModel, room: number): Promise<{ maxTokens: number, sampling: Sampling }> {
  const maxTokens = Math.min(optionalNumber(request.maxTokens, 'maxTokens', { min: 1, integer: true }) ?? room, room)
  const askedTemperature = optionalNumber(request.temperature, 'temperature', { min: 0, max: 2 }) ?? DEFAULT_TEMPERATURE
  const presencePenalty = optionalNumber(request.presencePenalty, 'presencePenalty', { min: -2, max: 2 }) ?? 0
  const frequencyPenalty = optionalNumber(request.frequencyPenalty, 'frequencyPenalty', { min: -2, max: 2 }) ?? 0
  const seed = optionalNumber(request.seed, 'seed', { integer: true })
  return {
    maxTokens,
    sampling: {
      temperature: askedTemperature < GREEDY_BELOW_TEMPERATURE ? 0 : askedTemperature,
      topP: optionalNumber(request.topP, 'topP', { min: 0, max: 1 }) ?? 1,
      topK: optionalNumber(request.topK, 'topK', { min: 0, integer: true }) ?? DEFAULT_TOP_K,
      // node-llama-cpp seeds from the clock in whole seconds, so two requests in the same second would sample
      // alike. llama.cpp takes a uint32 and reads 0xFFFFFFFF as "random", so any integer maps below that.
      seed: seed == null ? randomInt(SEED_RANGE) : ((seed % SEED_RANGE) + SEED_RANGE) % SEED_RANGE,
      repeatPenalty: presencePenalty === 0 && frequencyPenalty === 0
        ? false // node-llama-cpp would otherwise apply its own 1.1 repeat penalty, which OpenAI's API does not have
        : { penalty: 1, presencePenalty, frequencyPenalty, lastTokens: maxTokens, penalizeNewLine: true },
      customStopTriggers: stopStrings(request.stop),
      tokenBias: await tokenBias(request.logitBias, model)
    }
  }
}

/**
 * The number of tokens in the model's vocabulary, or null when its GGUF does not say (then ids cannot be checked).
 * The tokens are the one tokenizer array the engine leaves in `fileInfo` after a load (`releaseTokenizerArrays`).
 */
export function vocabularySize (model: LlamaModel): number | null {
  const metadata = model.fileInfo.metadata as unknown as Record<string, Record<string, unknown> | undefined>
  const tokens = (metadata.tokenizer?.ggml as { tokens?: unknown } | undefined)?.tokens
  if (Array.isArray(tokens)) return tokens.length
  const declared = metadata[String(metadata.general?.architecture)]?.vocab_size
  return typeof declared === 'number' && Number.isSafeInteger(declared) ? declared : null
}

/**
 * Checks token ids before they reach llama.cpp, which aborts the whole process on an id outside its vocabulary
 * (a C++ out_of_range, not an error we could catch).
 */
export function checkTokenIDs (tokens: readonly number[], model: LlamaModel, param: string): void {
  const size = vocabularySize(model)
  if (size == null) throw new InvalidGenerationRequestError('this model\'s GGUF does not give its vocabulary size, so token ids cannot be checked', param)
  tokens.forEach((token, i) => {
    if (!Number.isSafeInteger(token) || token < 0 || token >= size) {
      throw new InvalidGenerationRequestError(`${param}[${i}] must be a token id from 0 to ${size - 1}`, `${param}.${i}`)
    }
  })
}

async function tokenBias (logitBias: Record<string, number> | null | undefined, model: LlamaModel): Promise<TokenBias | undefined> {
  if (logitBias == null) return undefined
  if (typeof logitBias !== 'object' || Array.isArray(logitBias)) throw new InvalidGenerationRequestError('logitBias must map token ids to numbers', 'logitBias')
  const entries = Object.entries(logitBias)
  if (entries.length === 0) return undefined
  if (entries.length > MAX_LOGIT_BIAS_ENTRIES) throw new InvalidGenerationRequestError(`logitBias may hold at most ${MAX_LOGIT_BIAS_ENTRIES} tokens`, 'logitBias')
  const size = vocabularySize(model)
  if (size == null) throw new InvalidGenerationRequestError('this model\'s GGUF does not give its vocabulary size, so token ids cannot be checked', 'logitBias')
  const { TokenBias } = await llamaModule()
  const bias = new TokenBias(model.tokenizer)
  for (const [key, value] of entries) {
    const token = /^(0|[1-9][0-9]{0,9})$/.test(key) ? Number(key) : -1
    if (token < 0 || token >= size) throw new InvalidGenerationRequestError(`logitBias keys must be token ids from 0 to ${size - 1}`, `logitBias.${key}`)
    if (typeof value !== 'number' || !Number.isFinite(value) || Math.abs(value) > MAX_LOGIT_BIAS) {
      throw new InvalidGenerationRequestError(`logitBias values must be numbers from -${MAX_LOGIT_BIAS} to ${MAX_LOGIT_BIAS}`, `logitBias.${key}`)
    }
    // OpenAI adds the bias to the logit; -100 is documented as a ban, which "never" makes exact. End-of-generation
    // tokens keep their chance (node-llama-cpp ignores a bias on them), so a bias cannot make an answer endless.
    if (value !== 0) bias.set(token as Token, value <= -MAX_LOGIT_BIAS ? 'never' : { logit: value })
  }
  return bias
}

function stopStrings (stop: string[] | null | undefined): string[] | undefined {
  if (stop == null) return undefined
  if (!Array.isArray(stop) || stop.length > MAX_STOP_STRINGS || !stop.every((s) => typeof s === 'string' && s !== '')) {
    throw new InvalidGenerationRequestError(`stop must be at most ${MAX_STOP_STRINGS} non-empty strings`, 'stop')
  }
  return stop
}

export function optionalNumber (value: number | null | undefined, param: string, range: { min?: number, max?: number, integer?: boolean }): number | undefined {
  if (value == null) return undefined
  const ok = typeof value === 'number' && Number.isFinite(value) &&
    (range.integer !== true || Number.isSafeInteger(value)) &&
    (range.min === undefined || value >= range.min) && (range.max === undefined || value <= range.max)
  if (!ok) {
    const bounds = [range.min !== undefined ? `>= ${range.min}` : '', range.max !== undefined ? `<= ${range.max}` : ''].filter(Boolean).join(' and ')
    throw new InvalidGenerationRequestError(`${param} must be ${range.integer === true ? 'an integer' : 'a number'}${bounds === '' ? '' : ' ' + bounds}`, param)
  }
  return value
}
