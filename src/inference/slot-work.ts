import type { ChatWrapper, Llama, LlamaContextSequence, LlamaModel, Token } from 'node-llama-cpp'
import type { DoneEvent, FinishReason } from './chat.ts'
import type { PromptTokenizer } from './prompt-tokens.ts'
import type { CachedSlot } from './slot-cache.ts'

// The contract between the engine, which owns the slots and the queue, and each kind of generation (chat, text
// completion), which knows how to turn a request into node-llama-cpp calls on one slot.

/** One context sequence: a generation runs on it alone. It keeps what it evaluated for its requester (slot-cache.ts). */
export interface Slot extends CachedSlot {
  readonly sequence: LlamaContextSequence
}

/** What planning a generation needs of the loaded model. */
export interface ModelParts {
  readonly modelID: string
  /** Tokens one request may use, prompt and answer together. */
  readonly contextLength: number
  readonly llama: Llama
  readonly model: LlamaModel
  readonly chatWrapper: ChatWrapper
  /** Every text a request brings is tokenized through it (prompt-tokens.ts), never with `model.tokenize` directly. */
  readonly prompt: PromptTokenizer
}

/**
 * A request checked against the model and ready to run; planning throws InvalidGenerationRequestError before the
 * request takes a slot. `run` emits events as the model generates and resolves with the final `done` event; it
 * stops within a token once `signal` aborts, and then throws `signal.reason`.
 */
export interface SlotWork<E> {
  /** The prompt exactly as it will be evaluated: what a slot's cached tokens are matched against. */
  readonly tokens: readonly Token[]
  /** Resolves with `usage.cachedTokens` 0; the engine, which prepared the slot, fills it in. */
  run (slot: Slot, emit: (event: E) => void, signal: AbortSignal): Promise<DoneEvent>
}

/**
 * Runs `generate` on the slot and counts the tokens it sampled: one "output" token per sampling step (the logits of
 * the prompt's last token, then of each generated token but the last), so stop-string and end-of-generation tokens
 * count too, exactly as they cost.
 */
export async function metered<T> (slot: Slot, generate: () => Promise<T>): Promise<{ result: T, completionTokens: number }> {
  const before = slot.sequence.tokenMeter.getState()
  const result = await generate()
  return { result, completionTokens: slot.sequence.tokenMeter.diff(before).usedOutputTokens }
}

/**
 * The `done` event of a generation that stopped for `stopReason` (node-llama-cpp's, or the token loop's); an aborted
 * one throws `signal.reason` instead. `cachedTokens` is 0: the engine, which prepared the slot, fills it in.
 */
export function doneEvent (stopReason: string, promptTokens: number, completionTokens: number, signal: AbortSignal, customStopTrigger?: ReadonlyArray<unknown>): DoneEvent {
  if (stopReason === 'abort') throw signal.reason
  const finishReason: FinishReason = stopReason === 'maxTokens' ? 'length' : stopReason === 'functionCalls' ? 'tool_calls' : 'stop'
  const usage = { promptTokens, completionTokens, totalTokens: promptTokens + completionTokens, cachedTokens: 0 }
  // node-llama-cpp's matched trigger: the caller's stop string, as the pieces it was resolved into
  const stopSequence = stopReason === 'customStopTrigger' && customStopTrigger != null ? customStopTrigger.filter((piece) => typeof piece === 'string').join('') : null
  return { type: 'done', finishReason, usage, ...(stopSequence == null || stopSequence === '' ? {} : { stopSequence }) }
}

/** The token a model puts before every prompt, as node-llama-cpp decides it for text completions. */
export function beginningToken (model: LlamaModel): Token | null {
  const type = String(model.vocabularyType)
  if (type === 'rwkv' || type === 'ugm') return null
  if (type === 'wpm') return model.tokens.bos
  return model.tokens.shouldPrependBosToken ? model.tokens.bos : null
}
