import type { LlamaContextSequence, LlamaText, Token } from 'node-llama-cpp'
import type { DoneEvent } from './chat.ts'
import { llamaInternals, SamplingError, type LlamaInternals } from './llama.ts'
import type { Sampling } from './sampling.ts'
import { doneEvent, metered, type Slot } from './slot-work.ts'

// Our own token loop for plain generations (no tools, no grammar, no repeat penalty): what LlamaChat and
// LlamaCompletion do for them, without their per-token machinery. node-llama-cpp's layers cost 0.22-0.26 ms per token
// over its native calls (bench/engine-layers.ts), paid once per stream, one after another, on the main thread: a
// tenth of a 24M model's token, a fifth of a four-stream step. This loop queues each decode straight on the context's
// batch queue (so N streams still decode as one batch per step, formed by batching.ts), samples with a sampler
// configured once per request, and detects stops with node-llama-cpp's own detectors. Its text handling is LlamaChat's
// (test/inference/token-loop.test.ts holds it to LlamaChat's and LlamaCompletion's answers); for completions it also
// finds stop strings LlamaCompletion misses, which matches each token's text alone, without the tokens before it.

/** Why a loop stopped, in node-llama-cpp's words (LlamaChat's and LlamaCompletion's `stopReason`). */
export type LoopStopReason = 'eogToken' | 'stopGenerationTrigger' | 'customStopTrigger' | 'maxTokens' | 'abort'

export interface TokenLoop {
  /** The whole prompt; the part the slot already holds is reused, the rest evaluated. */
  readonly tokens: readonly Token[]
  readonly sampling: Sampling
  readonly maxTokens: number
  /** What ends the answer besides end-of-generation tokens: the chat template's own triggers (none for completions). */
  readonly stopTriggers: readonly LlamaText[]
  /** node-llama-cpp's internal parts the loop uses (`llamaInternals`); a plan without them does not loop. */
  readonly internals: LlamaInternals
}

/** node-llama-cpp 3.22's private parts the loop drives: the queue every sequence's decodes go through. */
interface SequenceInternals {
  _sequenceId: number
  _nextTokenIndex: number
  _contextTokens: Token[]
  _tokenMeter: unknown
  _context: {
    _ctx: { sampleToken (batchLogitIndex: number, sampler: unknown): Promise<number> }
    _decodeTokens (
      item: { sequenceId: number, tokens: Token[], firstTokenSequenceIndex: number, logits: boolean[], evaluationPriority: number, tokenMeter: unknown },
      logitDataMapper: (batchLogitIndex: number) => Promise<number>
    ): Promise<Array<[number, number]>>
  }
  _resolveSamplerConfig (options: object): object
}

/** node-llama-cpp's default evaluation priority, as LlamaChat and LlamaCompletion pass it. */
const EVALUATION_PRIORITY = 5
const UNKNOWN_UNICODE_CHAR = '\ufffd'
/** Tokens a token is detokenized after (node-llama-cpp's maxRecentDetokenizerTokens). */
const RECENT_TOKENS = 3

/**
 * The loop for a planned generation, or null when node-llama-cpp's own classes must run it: the caller says whether
 * its kind of request can loop (no tools, no grammar, a plain template); a repeat penalty, whose tokens change every
 * token, stays with them too, as does everything when node-llama-cpp's internal parts changed (`llamaInternals`).
 */
export async function planLoop (eligible: boolean, loop: Omit<TokenLoop, 'internals'>): Promise<TokenLoop | null> {
  if (!eligible || loop.sampling.repeatPenalty !== false) return null
  const internals = await llamaInternals()
  return internals == null ? null : { ...loop, internals }
}

/**
 * Whether the loop can run on this sequence: the private parts it drives are there, and the model keeps no
 * checkpoints (recurrent and sliding-window models need node-llama-cpp's own evaluation, which takes them).
 */
export function canLoop (sequence: LlamaContextSequence): boolean {
  const internals = sequence as unknown as Partial<SequenceInternals>
  return !sequence.needsCheckpoints &&
    typeof internals._nextTokenIndex === 'number' && Array.isArray(internals._contextTokens) &&
    typeof internals._resolveSamplerConfig === 'function' && typeof internals._context?._decodeTokens === 'function'
}

/** Runs `loop` on a slot, as a `SlotWork` does: text as `delta` events, and the `done` event with its usage. */
export async function runOnSlot (slot: Slot, loop: TokenLoop, emit: (event: { type: 'delta', text: string }) => void, signal: AbortSignal): Promise<DoneEvent> {
  const matched: { stop?: ReadonlyArray<unknown> } = {}
  const { result, completionTokens } = await metered(slot, async () => await runTokenLoop(slot.sequence, loop, (text) => {
    if (text !== '') emit({ type: 'delta', text })
  }, signal, matched))
  return doneEvent(result, loop.tokens.length, completionTokens, signal, matched.stop)
}

/**
 * Generates on `sequence` (which `canLoop` accepted) until an end-of-generation token, a stop trigger, `maxTokens`
 * or `signal`. Text goes to `emit` as it is final: held back while it may be the start of a stop trigger or of a
 * multi-byte character. The sequence ends up as node-llama-cpp leaves it: the prompt and every generated token but
 * the last evaluated, its token meter counting them.
 */
export async function runTokenLoop (sequence: LlamaContextSequence, loop: TokenLoop, emit: (text: string) => void, signal: AbortSignal, matched: { stop?: ReadonlyArray<unknown> } = {}): Promise<LoopStopReason> {
  const { LlamaSampler, StopGenerationDetector, TokenStreamRegulator, getQueuedTokensBeforeStopTrigger } = loop.internals
  const model = sequence.model
  const seq = sequence as unknown as SequenceInternals & LlamaContextSequence
  const { customStopTriggers, topK, ...samplerOptions } = loop.sampling
  const sampler = new LlamaSampler(model)
  try {
    // Configured once: the same configuration every token (node-llama-cpp re-applies it per token, to no effect). top_k 0
    // ("every token") becomes no top-k stage rather than node-llama-cpp's sort of the whole vocabulary (sampling.ts).
    sampler.applyConfig(seq._resolveSamplerConfig({ ...samplerOptions, topK: topK === 0 ? null : topK }))
    // As LlamaCompletion: reuse what the slot holds of the prompt (at least the last token is evaluated, for its logits).
    const prompt = loop.tokens as Token[]
    await sequence.adaptStateToTokens(prompt.slice(0, -1), false)
    let input = prompt.slice(sequence.nextTokenIndex)

    const regulator = new TokenStreamRegulator()
    const templateStops = new StopGenerationDetector()
    const customStops = new StopGenerationDetector()
    for (const trigger of StopGenerationDetector.resolveStopTriggers(loop.stopTriggers, model.tokenizer)) templateStops.addStopTrigger(trigger)
    for (const trigger of StopGenerationDetector.resolveStopTriggers(customStopTriggers ?? [], model.tokenizer)) customStops.addStopTrigger(trigger)
    // As LlamaChat: a token's text, which stops are found in, is detokenized after the tokens before it, the prompt's
    // included (`seen`); the text released after the answer's own (`answer`), so the answer's first leading space goes.
    const seen: Token[] = prompt.slice(-RECENT_TOKENS)
    const answer: Token[] = []
    const pending: Token[] = []
    const partial: Token[] = []
    const onValidText: Array<{ dispose: () => void }> = []
    // Released tokens become text as LlamaChat's SegmentHandler makes it: text that ends in an incomplete character
    // waits for the next token, and is dropped if none completes it.
    const incomplete: Token[] = []
    const release = (tokens: Token[]): void => {
      for (const token of tokens) {
        incomplete.push(token)
        const text = model.detokenize(incomplete, false, answer.slice(-RECENT_TOKENS))
        if (text.endsWith(UNKNOWN_UNICODE_CHAR)) continue
        emit(text)
        for (const done of incomplete.splice(0)) answer.push(done)
      }
    }

    for (let generated = 0; ; generated++) {
      if (generated >= loop.maxTokens) return 'maxTokens'
      if (signal.aborted) return 'abort'
      const failure: { error?: unknown } = {}
      const token = evaluated(seq, input, await queueDecode(seq, input, sampler._sampler, failure), failure)
      input = [token]
      // From here on, what LlamaChat and LlamaCompletion do with each sampled token (node-llama-cpp 3.22).
      const tokens = [...partial, token]
      const text = model.detokenize(tokens, false, seen.slice(-RECENT_TOKENS))
      const eog = model.isEogToken(token)
      if (text.endsWith(UNKNOWN_UNICODE_CHAR) && !model.isSpecialToken(token) && !eog) {
        partial.push(token) // a character's first bytes, which later tokens complete (LlamaChat waits for all of them)
        continue
      }
      partial.length = 0
      for (const t of tokens) seen.push(t)
      const queued = regulator.addChunk({ tokens, text })
      if (text.endsWith(UNKNOWN_UNICODE_CHAR) || (text === '' && onValidText.length > 0 && !model.isSpecialToken(token))) {
        onValidText.push(queued.createTextIndexLock(0))
      } else {
        for (const lock of onValidText.splice(0)) lock.dispose()
      }
      templateStops.recordGeneration({ text, tokens, queuedTokenRelease: queued })
      customStops.recordGeneration({ text, tokens, queuedTokenRelease: queued })
      if (eog) queued.createTokenIndexLock(0)
      for (const free of regulator.popFreeChunkTokens()) pending.push(free)
      if (templateStops.hasTriggeredStops || customStops.hasTriggeredStops || eog) {
        const triggered = templateStops.hasTriggeredStops ? templateStops.getTriggeredStops() : customStops.getTriggeredStops()
        for (const free of getQueuedTokensBeforeStopTrigger(triggered, regulator.getPartiallyFreeChunk(model.tokenizer), model.tokenizer)) pending.push(free)
        release(pending.splice(0))
        if (!eog && !templateStops.hasTriggeredStops) matched.stop = triggered[0]?.stopTrigger
        return eog ? 'eogToken' : templateStops.hasTriggeredStops ? 'stopGenerationTrigger' : 'customStopTrigger'
      }
      release(pending.splice(0))
    }
  } finally {
    sampler.dispose()
  }
}

/**
 * Queues `tokens` on the sequence's context, as node-llama-cpp's own evaluation does, to sample the token after the
 * last one. A sampling failure is caught where node-llama-cpp's batch loop would have it unhandled (llama.ts,
 * `guardSampling`) and left in `failure`. Not an async function, and awaited by the loop itself: the loop then
 * resumes, and queues the next decode, before node-llama-cpp's batch loop looks at its queue again; if the batch loop
 * found its queue empty first it would let go of the context's lock, and taking it again costs ~0.1 ms per token.
 */
function queueDecode (sequence: SequenceInternals & LlamaContextSequence, tokens: Token[], sampler: unknown, failure: { error?: unknown }): Promise<Array<[number, number]>> {
  // node-llama-cpp's own checks before a decode (planning keeps every request within the context, so these never fire)
  if (sequence.disposed) throw new Error('The context sequence was disposed')
  if (sequence._nextTokenIndex + tokens.length > sequence.context.contextSize - 1) throw new Error('The context is full')
  const context = sequence._context
  const logits: boolean[] = []
  logits[tokens.length - 1] = true
  return context._decodeTokens({
    sequenceId: sequence._sequenceId,
    tokens,
    firstTokenSequenceIndex: sequence._nextTokenIndex,
    logits,
    evaluationPriority: EVALUATION_PRIORITY,
    tokenMeter: sequence._tokenMeter
  }, (batchLogitIndex) => {
    const fail = (error: unknown): number => {
      failure.error ??= error
      return -1
    }
    try {
      return context._ctx.sampleToken(batchLogitIndex, sampler).catch(fail)
    } catch (error) { // thrown, not rejected: it would escape into node-llama-cpp's batch loop, which nobody awaits
      return Promise.resolve(fail(error))
    }
  })
}

/** The sampled token, once the sequence records `tokens` as evaluated (what node-llama-cpp's own decode records). */
function evaluated (sequence: SequenceInternals, tokens: Token[], sampled: Array<[number, number]>, failure: { error?: unknown }): Token {
  sequence._nextTokenIndex += tokens.length
  for (const token of tokens) sequence._contextTokens.push(token)
  if ('error' in failure) throw new SamplingError(failure.error)
  const token = sampled.at(-1)?.[1]
  if (token == null || token < 0) throw new SamplingError(new Error('no token was sampled'))
  return token as Token
}
