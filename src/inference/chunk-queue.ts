import { pushable, type Pushable } from 'it-pushable'

/**
 * Turns node-llama-cpp's callbacks (`onTextChunk`) into an async iterator for one consumer, so text can be
 * yielded token by token while the generation runs. The producer never waits for the consumer: a generation holds
 * a slot others queue for, so it runs at full speed and the buffer grows by at most `maxTokens` chunks. A consumer
 * that leaves early ends it: what is pushed after is dropped.
 */
export class ChunkQueue<T> implements AsyncIterable<T> {
  readonly #items: Pushable<T> = pushable<T>({ objectMode: true })

  push (item: T): void {
    this.#items.push(item)
  }

  /** No more items: the iterator finishes once the buffered ones are consumed. */
  end (): void {
    this.#items.end()
  }

  /** The producer failed: the iterator throws `reason` once the buffered items are consumed. */
  fail (reason: unknown): void {
    // An error given to end() replaces what is still buffered: it goes in only once the consumer has taken those.
    const items = this.#items
    void items.onEmpty().then(() => { items.end((reason ?? new Error('the producer failed')) as Error) })
  }

  [Symbol.asyncIterator] (): AsyncIterator<T> {
    return this.#items
  }
}
