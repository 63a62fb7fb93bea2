import { test } from 'node:test'
import assert from 'node:assert/strict'
import type { BatchItem, CustomBatchingPrioritizationStrategy, LlamaContext } from 'node-llama-cpp'
import { SequenceOrderedBatching } from '../../src/inference/batching.ts'

// How the engine's context forms batches, checked on node-llama-cpp's own item shapes: the strategy is a pure function
// of the queued items (and of the context's queue, which names their sequences). The whole engine runs it in the
// inference tests; bench:llama-server measures what it gains.

function item (tokens: number): BatchItem {
  return { tokens: Array.from({ length: tokens }, (_, i) => i) as unknown as BatchItem['tokens'], logits: [], evaluationPriority: 5 }
}

/** The strategy, attached to a stand-in for node-llama-cpp's private queue of [sequenceId, item] pairs. */
function strategyFor (queue: Array<{ sequenceId: number }>): CustomBatchingPrioritizationStrategy {
  const batching = new SequenceOrderedBatching()
  batching.attach({ _queuedDecodes: queue } as unknown as LlamaContext)
  const strategy = batching.options.itemPrioritizationStrategy
  assert.equal(typeof strategy, 'function')
  return strategy as CustomBatchingPrioritizationStrategy
}

test('items go into the batch in sequence order, each with its share of the budget, prompts taking what is left', () => {
  const queue = [{ sequenceId: 2 }, { sequenceId: 0 }, { sequenceId: 3 }, { sequenceId: 1 }]
  const items = [item(1), item(300), item(1), item(1)] // sequence 0 is evaluating a 300-token prompt
  const batch = strategyFor(queue)({ items, size: 128 })
  assert.deepEqual(batch.map((b) => items.indexOf(b.item)), [1, 3, 0, 2], 'sequences 0, 1, 2, 3')
  assert.deepEqual(batch.map((b) => b.processAmount), [125, 1, 1, 1], 'one token each for the generating ones, the rest to the prompt')
})

test('a batch waits (a bounded number of rounds) for the sequences that took part in the last two', () => {
  const queue = [{ sequenceId: 0 }, { sequenceId: 1 }, { sequenceId: 2 }, { sequenceId: 3 }]
  const strategy = strategyFor(queue)
  const four = [item(1), item(1), item(1), item(1)]
  const heldRounds = (items: BatchItem[]): number => {
    let rounds = 0
    while (strategy({ items, size: 512 }).length === 0) rounds++
    return rounds
  }
  assert.equal(heldRounds(four), 0)
  // Three of the four are back: hold, so that the fourth joins this batch rather than trail in one of its own.
  queue.splice(3)
  assert.deepEqual(strategy({ items: four.slice(0, 3), size: 512 }), [])
  // ... but not forever: a sequence that stopped generating never comes back. It is waited for in the next batch too
  // (it might only have fallen one behind), and then no more.
  const first = 1 + heldRounds(four.slice(0, 3))
  assert.ok(first > 1 && first <= 17, `held ${first} rounds`)
  assert.ok(heldRounds(four.slice(0, 3)) > 0)
  assert.equal(heldRounds(four.slice(0, 3)), 0)
})

test('a sequence one batch behind is waited for, so the streams fall back into step', () => {
  const queue = [{ sequenceId: 0 }, { sequenceId: 1 }]
  const strategy = strategyFor(queue)
  const [a, b] = [item(1), item(1)]
  assert.equal(strategy({ items: [a, b], size: 512 }).length, 2)
  // Sequence 1 is late (its next token took longer): after the bounded wait, 0 goes alone...
  queue.splice(1)
  let batch = strategy({ items: [a], size: 512 })
  while (batch.length === 0) batch = strategy({ items: [a], size: 512 })
  // ... then 1 arrives while 0 has not re-queued yet: 1 waits for 0 instead of going alone, out of step.
  queue.splice(0, 1, { sequenceId: 1 })
  assert.deepEqual(strategy({ items: [b], size: 512 }), [])
  queue.push({ sequenceId: 0 })
  assert.equal(strategy({ items: [b, a], size: 512 }).length, 2)
})

test('without the private queue (another node-llama-cpp) items keep their order and nothing else breaks', () => {
  const batching = new SequenceOrderedBatching()
  batching.attach({} as unknown as LlamaContext)
  const items = [item(2), item(1)]
  const batch = (batching.options.itemPrioritizationStrategy as CustomBatchingPrioritizationStrategy)({ items, size: 8 })
  assert.deepEqual(batch.map((b) => [items.indexOf(b.item), b.processAmount]), [[0, 2], [1, 1]])
})
