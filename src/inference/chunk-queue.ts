/**
 * Turns node-llama-cpp's callbacks (`onTextChunk`) into an async iterator for one consumer, so text can be
 * yielded token by token while the generation runs. The producer never waits for the consumer: a generation holds
 * a slot others queue for, so it runs at full speed and the buffer grows by at most `maxTokens` chunks.
 */
export class ChunkQueue<T> implements AsyncIterable<T> {
  private readonly items: T[] = []
  private ended = false
  private failure: { reason: unknown } | null = null
  private wake: (() => void) | null = null

  push (item: T): void {
    this.items.push(item)
    this.notify()
  }

  /** No more items: the iterator finishes once the buffered ones are consumed. */
  end (): void {
    this.ended = true
    this.notify()
  }

  /** The producer failed: the iterator throws `reason` once the buffered items are consumed. */
  fail (reason: unknown): void {
    this.failure = { reason }
    this.notify()
  }

  async * [Symbol.asyncIterator] (): AsyncGenerator<T, void, undefined> {
    while (true) {
      if (this.items.length > 0) {
        for (const item of this.items.splice(0)) yield item
        continue
      }
      if (this.failure != null) throw this.failure.reason
      if (this.ended) return
      await new Promise<void>((resolve) => { this.wake = resolve })
    }
  }

  private notify (): void {
    const wake = this.wake
    this.wake = null
    wake?.()
  }
}
