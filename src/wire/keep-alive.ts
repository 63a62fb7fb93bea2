import { firstOrTimeout } from './frames.ts'

export interface KeepAliveOptions {
  /** Quiet time after which `keepAlive` is called, again after each further quiet spell of this length. */
  everyMs: number
  /** Writes a keep-alive frame, so the other side can tell a request still waiting (for a slot, a long prompt) from a
   *  dead peer. A throw ends the stream (the peer is gone). */
  keepAlive: () => Promise<void>
  /** Most items handed over in one batch. @default 256 */
  maxBatch?: number
}

/**
 * The streaming side of a long exchange, once: yields `source`'s items in batches of everything that has already
 * arrived (at least one), so that under backpressure (a slow relay, a busy event loop) a writer sends one frame for
 * many tokens instead of one frame per token; and while nothing arrives for `everyMs`, calls `keepAlive` and keeps
 * waiting for the same item. Leaving early returns `source`, which stops the work behind it (a generation).
 */
export async function * batchesWithKeepAlives<T> (source: AsyncIterable<T>, options: KeepAliveOptions): AsyncGenerator<T[], void, undefined> {
  const maxBatch = options.maxBatch ?? 256
  const items = source[Symbol.asyncIterator]()
  let next: Promise<IteratorResult<T>> | null = null
  try {
    for (;;) {
      next ??= items.next()
      const first = await firstOrTimeout(next, options.everyMs)
      if (first === 'timeout') {
        await options.keepAlive()
        continue
      }
      next = null
      if (first.done === true) return
      const batch = [first.value]
      let ended = false
      while (batch.length < maxBatch) {
        next = items.next()
        const ready = await settledNow(next)
        if (ready === NOT_YET) break
        next = null
        if (ready.done === true) {
          ended = true
          break
        }
        batch.push(ready.value)
      }
      yield batch
      if (ended) return
    }
  } finally {
    // Left while an item was pending (a keep-alive could not be written: the peer is gone): its outcome no longer
    // matters, and the source's own stop below settles it; it must not surface as an unhandled rejection.
    next?.then(undefined, () => undefined)
    await items.return?.()
  }
}

const NOT_YET = Symbol('not yet')

/** The promise's result if it has already settled, else NOT_YET; never waits (beyond a microtask). */
async function settledNow<T> (promise: Promise<T>): Promise<T | typeof NOT_YET> {
  return await Promise.race([promise, Promise.resolve(NOT_YET)])
}
