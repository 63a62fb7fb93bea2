// The per-token queue between a generation and its one consumer: order, end and failure after what is buffered.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { ChunkQueue } from '../../src/inference/chunk-queue.ts'

test('items come in order, those pushed before the consumer and while it waits; end finishes after the buffered ones', async () => {
  const queue = new ChunkQueue<number>()
  queue.push(1)
  queue.push(2)
  const seen: number[] = []
  const reading = (async () => { for await (const item of queue) seen.push(item) })()
  await new Promise((resolve) => setImmediate(resolve)) // the consumer has taken both and waits
  queue.push(3)
  queue.push(4)
  queue.end()
  queue.push(5) // after the end: never seen
  await reading
  assert.deepEqual(seen, [1, 2, 3, 4])
})

test('a failure is thrown once the buffered items are consumed, and to a consumer that waits', async () => {
  const buffered = new ChunkQueue<string>()
  buffered.push('a')
  buffered.push('b')
  buffered.fail(new Error('boom'))
  const seen: string[] = []
  await assert.rejects(async () => { for await (const item of buffered) seen.push(item) }, /boom/)
  assert.deepEqual(seen, ['a', 'b'])

  const waiting = new ChunkQueue<string>()
  const reading = (async () => { for await (const item of waiting) seen.push(item) })()
  await new Promise((resolve) => setImmediate(resolve))
  waiting.fail(new Error('later'))
  await assert.rejects(reading, /later/)
})

test('a consumer that leaves early ends the queue: later pushes are dropped', async () => {
  const queue = new ChunkQueue<number>()
  for (let i = 0; i < 3; i++) queue.push(i)
  for await (const item of queue) if (item === 0) break
  queue.push(99)
  queue.end()
  const rest: number[] = []
  for await (const item of queue) rest.push(item)
  assert.deepEqual(rest, [])
})
