import type { BatchingOptions, BatchItem, LlamaContext, PrioritizedBatchItem } from 'node-llama-cpp'
import { decodeQueueOf } from './patches/node-llama-cpp.ts'

/**
 * How often the batch loop may come back for the sequences it expects before it decodes without them. Each return is
 * one trip through node-llama-cpp's batch loop, a few microtasks; a sampled sequence re-queues within a few of them
 * (bench/README.md), so this bound, well above that, is reached only when a sequence has stopped or waits on I/O.
 */
const MAX_HOLDS = 16
/** A sequence counts as generating while it took part in one of this many latest batches. */
const ACTIVE_BATCHES = 2

/**
 * How one context forms its decode batches, so that N streams decode as one batch of N tokens per step, as
 * llama-server does (with node-llama-cpp's defaults, several streams decode well below llama-server's aggregate;
 * bench/README.md). Two decisions, both made through node-llama-cpp's public `batching` options:
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
 *   is read from the context's queue, which lists the same items in the same order (the `batch-sequence-order` patch,
 *   patches/node-llama-cpp.ts: where that private queue is not there, the patch says so at start, and the items keep
 *   their queue order).
 *
 * Then the batch's token budget is shared as node-llama-cpp's own "maximumParallelism" does: every item gets an
 * equal share, and what short items leave goes to the long ones (prompts), in order.
 */
export class SequenceOrderedBatching {
  /** The options to pass to `model.createContext({ batching })`; call `attach` with the context it returns. */
  readonly options: BatchingOptions
  #queue: (() => ReadonlyArray<{ sequenceId?: unknown }>) | null = null
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
    this.#queue = decodeQueueOf(context)
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

  /** The items' sequence ids, read from the context's queue; null without the queue, or when it lists other items. */
  #sequenceIds (items: readonly BatchItem[]): number[] | null {
    const queue = this.#queue?.()
    if (queue == null || queue.length !== items.length) return null
    const ids = queue.map((queued) => queued.sequenceId)
    return ids.every((id) => typeof id === 'number') ? ids as number[] : null
  }
}
