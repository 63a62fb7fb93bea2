import { test } from 'node:test'
import assert from 'node:assert/strict'
import { compactHeap } from '../../src/inference/heap.ts'

test('compactHeap collects the garbage a load leaves and gives its pages back', () => {
  // Garbage of the kind a GGUF's metadata leaves: many strings and arrays, referenced until "the load" ends
  let garbage: string[][] | null = Array.from({ length: 200 }, (_, i) => Array.from({ length: 1000 }, (_, j) => `token-${i}-${j}-${'x'.repeat(64)}`))
  assert.equal(garbage.length, 200)
  const holding = process.memoryUsage().heapUsed
  garbage = null
  assert.equal(compactHeap(), true, 'the collector is reachable on this Node')
  const after = process.memoryUsage()
  // ~20 MB of strings were live before; a full collection frees them (the bound leaves room for anything else the
  // process allocated meanwhile)
  assert.ok(after.heapUsed < holding - 10e6, `heap used ${after.heapUsed} after, ${holding} holding the garbage`)
  assert.ok(after.heapTotal < holding, `heap reserved ${after.heapTotal} after, ${holding} used holding the garbage: pages were given back`)
})

test('compactHeap can run on every load', () => {
  assert.equal(compactHeap(), true)
  assert.equal(compactHeap(), true)
})
