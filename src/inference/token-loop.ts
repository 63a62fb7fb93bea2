import type { LlamaContextSequence, LlamaText, Token } from 'node-llama-cpp'
import type { DoneEvent } from './chat.ts'
import { tokenLoopInternals, type LlamaInternals } from './patches/node-llama-cpp.ts'
import type { Sampling } from './sampling.ts'
import { doneEvent, metered, type Slot } from './slot-work.ts'

// Our own token loop for plain generations (no tools, no grammar, no repeat penalty): what LlamaChat and
// LlamaCompletion do for them, without their per-token machinery. node-llama-cpp's layers cost a fixed time per token
// over its native calls (bench/engine-layers.ts), paid once per stream, one after another, on the main thread: a
// share of every token that grows as the model gets smaller and the streams more (bench/README.md). This loop queues
// each decode straight on the context's batch queue (so N streams still decode as one batch per step, formed by
// batching.ts), samples with a sampler configured once per request, and detects stops with node-llama-cpp's own
// detectors. Its text handling is LlamaChat's (test/inference/token-loop.test.ts holds it to LlamaChat's and
// LlamaCompletion's answers); for completions it also finds stop strings LlamaCompletion misses, which matches each
// token's text alone, without the tokens before it.

/** Why a loop stopped, in node-llama-cpp's words (LlamaChat's and LlamaCompletion's `stopReason`). */
export type LoopStopReason = 'eogToken' | 'stopGenerationTrigger' | 'customStopTrigger' | 'maxTokens' | 'abort'

export interface TokenLoop {
  /** The whole prompt; the part the slot already holds is reused, the rest evaluated. */
  readonly tokens: readonly Token[]
  readonly sampling: Sampling
  readonly maxTokens: number
  /** What ends the answer besides end-of-generation tokens: the chat template's own triggers (none for completions). */
  readonly stopTriggers: readonly LlamaText[]
  /** node-llama-cpp's internal parts the loop uses (the `token-loop` patch); a plan without them does not loop. */
  readonly internals: LlamaInternals
}

const UNKNOWN_UNICODE_CHAR = '\ufffd'
/** Tokens a token is detokenized after (node-llama-cpp's maxRecentDetokenizerTokens). */
const RECENT_TOKENS = 3

/**
 * The loop for a planned generation, or null when node-llama-cpp's own classes must run it: the caller says whether
 * its kind of request can loop (no tools, no grammar, a plain template); a repeat penalty, whose tokens change every
 * token, stays with them too, as does everything where the `token-loop` patch did not take (reported at start).
 */
export async function planLoop (eligible: boolean, loop: Omit<TokenLoop, 'internals'>): Promise<TokenLoop | null> {
  if (!eligible || loop.sampling.repeatPenalty !== false) return null
  const internals = await tokenLoopInternals()
  return internals == null ? null : { ...loop, internals }
}

/**
 * Whether the loop can run on this sequence: the model keeps no checkpoints (recurrent and sliding-window models need
 * node-llama-cpp's own evaluation, which takes them). The private parts it drives were checked once, by the patch.
 */
export function canLoop (sequence: LlamaContextSequence): boolean {
  return !sequence.needsCheckpoints
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
  const { LlamaSampler, StopGenerationDetector, TokenStreamRegulator, getQueuedTokensBeforeStopTrigger, resolveSamplerConfig, queueDecode, evaluated } = loop.internals
  const model = sequence.model
  const { customStopTriggers, topK, ...samplerOptions } = loop.sampling
  const sampler = new LlamaSampler(model)
  try {
    // Configured once: the same configuration every token (node-llama-cpp re-applies it per token, to no effect). top_k 0
    // ("every token") becomes no top-k stage rather than node-llama-cpp's sort of the whole vocabulary (sampling.ts).
    sampler.applyConfig(resolveSamplerConfig(sequence, { ...samplerOptions, topK: topK === 0 ? null : topK }))
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
      const token = evaluated(sequence, input, await queueDecode(sequence, input, sampler, failure), failure)
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
