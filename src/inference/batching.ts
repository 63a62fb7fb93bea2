import type { BatchingOptions, BatchItem, LlamaContext, PrioritizedBatchItem } from 'node-llama-cpp'

/**
 * How often the batch loop may come back for the sequences it expects before it decodes without them. Each return is
 * one trip through node-llama-cpp's batch loop, a few microtasks; a sampled sequence re-queues within about five
 * (measured, 24M model, 4 streams), so this bound is reached only when a sequence has stopped or waits on I/O.
 */
const MAX_HOLDS = 16
/** A sequence counts as generating while it took part in one of this many latest batches. */
const ACTIVE_BATCHES = 2

/**
 * How one context forms its decode batches, so that N streams decode as one batch of N tokens per step, as
 * llama-server does (node-llama-cpp's defaults reached 0.64-0.72x llama-server's aggregate with 4 streams; see
 * shared/notes/inference-speed-2026-11-22.md). Two decisions, both made through node-llama-cpp's public `batching`
 * options:
 *
 * - **Complete batches.** node-llama-cpp forms the next batch as soon as the previous one's samples resolve, before
 *   the sequences just sampled have re-queued (they come back through several promise hops), so 4 streams decoded as
 *   batches of 3 and 1. The prioritization strategy holds a batch back (returns nothing, which sends the batch loop
 *   round once more) while a sequence that took part in either of the last two batches is not queued yet, at most
 *   MAX_HOLDS times. Two batches, not one: a sequence that fell one batch behind (its first token takes longer) is
 *   waited for, and the streams fall back into step, instead of trailing one batch apart for the rest of the answer.
 * - **Sequence order.** node-llama-cpp gives every sequence its own KV stream, and llama.cpp splits a batch whose
 *   sequence ids are out of order into several micro-batches (one matrix-vector product per sequence instead of one
 *   matrix product for all). Items are sorted by sequence id. node-llama-cpp's BatchItem does not carry the id, so it
 *   is read from the context's queue, which lists the same items in the same order (node-llama-cpp is pinned; if
 *   that private field changes shape the items keep their queue order and only this optimisation is lost).
 *
 * Then the batch's token budget is shared as node-llama-cpp's own "maximumParallelism" does: every item gets an
 * equal share, and what short items leave goes to the long ones (prompts), in order.
 */
export class SequenceOrderedBatching {
  /** The options to pass to `model.createContext({ batching })`; call `attach` with the context it returns. */
  readonly options: BatchingOptions
  #queue: (() => unknown) | null = null
  /** Sequence id → the batch it last took part in (when the ids can be read). */
  readonly #lastBatch = new Map<number, number>()
  #batches = 0
  /** Items in the last batch: what is waited for when the ids cannot be read. */
  #expected = 0
  #holds = 0

  constructor () {
    this.options = {
      // Called when a decode is queued and node-llama-cpp has not dispatched already (it does so itself once every
      // sequence of the context is queued). Dispatching in a microtask, instead of its default next event-loop turn,
      // saves a whole turn per token when fewer streams run than the context has sequences; the strategy below
      // still waits for the streams that are about to re-queue.
      dispatchSchedule: (dispatch) => { queueMicrotask(dispatch) },
      itemPrioritizationStrategy: ({ items, size }) => this.#prioritize(items, size)
    }
  }

  attach (context: LlamaContext): void {
    const queue = (context as unknown as { _queuedDecodes?: unknown })._queuedDecodes
    this.#queue = Array.isArray(queue) ? () => (context as unknown as { _queuedDecodes: unknown })._queuedDecodes : null
  }

  #prioritize (items: readonly BatchItem[], size: number): PrioritizedBatchItem[] {
    const ids = this.#sequenceIds(items)
    if (this.#holds < MAX_HOLDS && this.#missing(items, ids)) {
      this.#holds++
      return []
    }
    this.#holds = 0
    this.#expected = items.length
    this.#batches++
    if (ids != null) for (const id of ids) this.#lastBatch.set(id, this.#batches)
    const ordered = ids == null
      ? [...items]
      : items.map((item, i) => ({ item, id: ids[i] })).sort((a, b) => a.id - b.id).map(({ item }) => item)
    const share = Math.max(1, Math.floor(size / ordered.length))
    let left = size
    const batch = ordered.map((item): PrioritizedBatchItem => {
      const processAmount = Math.min(item.tokens.length, share, left)
      left -= processAmount
      return { item, processAmount }
    })
    for (const entry of batch) {
      if (left <= 0) break
      const more = Math.min(entry.item.tokens.length - entry.processAmount, left)
      entry.processAmount += more
      left -= more
    }
    return batch.filter((entry) => entry.processAmount > 0)
  }

  /** Whether a sequence that is generating has not re-queued yet. */
  #missing (items: readonly BatchItem[], ids: number[] | null): boolean {
    if (ids == null) return items.length < this.#expected
    const queued = new Set(ids)
    for (const [id, batch] of this.#lastBatch) {
      if (batch <= this.#batches - ACTIVE_BATCHES) this.#lastBatch.delete(id) // it stopped: no longer waited for
      else if (!queued.has(id)) return true
    }
    return false
  }

  /** The items' sequence ids, read from the context's queue; null when that private field is not what we expect. */
  #sequenceIds (items: readonly BatchItem[]): number[] | null {
    const queue = this.#queue?.()
    if (!Array.isArray(queue) || queue.length !== items.length) return null
    const ids = queue.map((queued: { sequenceId?: unknown }) => queued.sequenceId)
    return ids.every((id) => typeof id === 'number') ? ids as number[] : null
  }
}

const ERASURES = Symbol.for('meshnode.erasuresGetTheLock')

interface ErasureState {
  /** Sequence id → erasures of that sequence under way. */
  pending: Map<number, number>
  /** Decodes of other sequences waiting for the erasures to be through. */
  waiting: Array<() => void>
}

/**
 * Lets a sequence's erasure (clearing it, or LlamaChat trimming a reused prefix to what the new prompt shares) take
 * the context's lock while other sequences generate. node-llama-cpp's batch loop holds that lock for as long as any
 * decode is queued, and with three or more streams one always is: measured, a fourth request's `clearHistory` waited
 * until the other three generations had finished (24 s). While an erasure is pending, the other sequences' next
 * decodes wait; the loop drains what is queued, lets go of the lock, the erasure runs (a few cache operations), and
 * they go on, together, in the next batch. A sequence with its own erasure pending is never held (its erasure may
 * re-evaluate tokens before it returns). Private methods of the pinned node-llama-cpp; a changed shape leaves them
 * alone, as in `guardSampling`.
 */
export function letErasuresIn (Context: { prototype: object }, Sequence: { prototype: object }): boolean {
  const context = Context.prototype as Record<string | symbol, unknown>
  const sequence = Sequence.prototype as Record<string | symbol, unknown>
  const decode = context._decodeTokens
  const erase = sequence._eraseContextTokenRanges
  if (context[ERASURES] === true) return true
  if (typeof decode !== 'function' || decode.length !== 2 || typeof erase !== 'function' || erase.length !== 1) return false
  context[ERASURES] = true
  const states = new WeakMap<object, ErasureState>()
  const stateOf = (owner: object): ErasureState => {
    let state = states.get(owner)
    if (state == null) states.set(owner, state = { pending: new Map(), waiting: [] })
    return state
  }
  sequence._eraseContextTokenRanges = async function (this: { _context: object, _sequenceId: number }, ...args: unknown[]): Promise<unknown> {
    const state = stateOf(this._context)
    const id = this._sequenceId
    state.pending.set(id, (state.pending.get(id) ?? 0) + 1)
    try {
      return await (erase as (...a: unknown[]) => Promise<unknown>).apply(this, args)
    } finally {
      const left = (state.pending.get(id) ?? 1) - 1
      if (left > 0) state.pending.set(id, left)
      else state.pending.delete(id)
      if (state.pending.size === 0) for (const resume of state.waiting.splice(0)) resume()
    }
  }
  // Not an async function: with no erasure pending (nearly always) the decode's own promise is returned as it is. Two
  // more promise hops per decode let node-llama-cpp's batch loop find its queue empty and let go of the lock before the
  // sequence re-queued; taking it again cost ~0.1 ms per token (24M model, one stream: 1.88 against 1.79 ms).
  context._decodeTokens = function (this: object, ...args: unknown[]): Promise<unknown> {
    const state = states.get(this)
    const id = (args[0] as { sequenceId?: unknown } | undefined)?.sequenceId
    const held = (): boolean => state != null && state.pending.size > 0 && !(typeof id === 'number' && state.pending.has(id))
    if (!held()) return (decode as (...a: unknown[]) => Promise<unknown>).apply(this, args)
    return (async () => {
      while (held()) await new Promise<void>((resolve) => { state?.waiting.push(resolve) })
      return await (decode as (...a: unknown[]) => Promise<unknown>).apply(this, args)
    })()
  }
  return true
}
