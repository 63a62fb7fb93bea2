// Swapping models for a request: a load with whenIdle lets the current model's admitted requests finish,
// requests that arrive meanwhile wait for the new model, and a request placed on the old one is told it was swapped.
import { test } from 'node:test'
import type { TestContext } from 'node:test'
import assert from 'node:assert/strict'
import { join } from 'node:path'
import { LocalEngine, ModelSwappedError, QueueFullError, type ChatEvent, type ChatRequest, type GenerateOptions } from '../../src/inference/index.ts'
import { tempDir } from '../support/node.ts'
import { writeTinyGguf } from '../support/tiny-gguf.ts'

const HELLO: ChatRequest = { messages: [{ role: 'user', content: 'hello there' }], temperature: 0, maxTokens: 6 }

async function twoModels (t: TestContext, options: { queueSize?: number } = {}): Promise<{ engine: LocalEngine, first: string, second: string }> {
  const dir = await tempDir(t, 'meshnode-swap-')
  const first = (await writeTinyGguf(join(dir, 'first.gguf'), { seed: 1, contextLength: 2048 })).path
  const second = (await writeTinyGguf(join(dir, 'second.gguf'), { seed: 2, contextLength: 2048 })).path
  const engine = new LocalEngine({}, { threads: 1, slots: 1, ...options })
  t.after(() => engine.close())
  await engine.load('first', first)
  return { engine, first, second }
}

async function answer (engine: LocalEngine, request: ChatRequest, options?: GenerateOptions): Promise<{ text: string, completionTokens: number }> {
  let text = ''
  let done: Extract<ChatEvent, { type: 'done' }> | undefined
  for await (const event of engine.generate(request, options)) {
    if (event.type === 'delta') text += event.text
    else if (event.type === 'done') done = event
  }
  assert.ok(done != null)
  return { text, completionTokens: done.usage.completionTokens }
}

test('a swap waits for the running and queued generations; requests arriving meanwhile are answered by the new model', async (t) => {
  const { engine, second } = await twoModels(t)
  const reference = await answer(engine, HELLO)
  const running = answer(engine, { ...HELLO, maxTokens: 200 }, { modelID: 'first' })
  const queued = answer(engine, HELLO, { modelID: 'first' }) // waits for the one slot, admitted on the first model
  await new Promise((resolve) => setImmediate(resolve))
  assert.deepEqual(engine.stats(), { slots: 1, busySlots: 1, queued: 1 })

  const swapping = engine.load('second', second, { whenIdle: true })
  // Arriving during the swap: waits (counted as queued), then runs on the second model.
  await new Promise((resolve) => setImmediate(resolve))
  const during = answer(engine, HELLO)
  await new Promise((resolve) => setImmediate(resolve))
  assert.equal(engine.stats().queued, 2, 'the request for the first model and the one waiting for the swap')
  assert.equal(engine.loaded()?.modelID, 'first')

  assert.equal((await running).completionTokens, 200, 'the running generation was not cut')
  assert.equal((await queued).text, reference.text, 'the queued one ran on the first model')
  assert.equal((await swapping).modelID, 'second')
  const afterSwap = await during
  assert.equal(afterSwap.completionTokens, 6)
  assert.notEqual(afterSwap.text, reference.text, 'the second model answered it')
  assert.deepEqual(engine.stats(), { slots: 1, busySlots: 0, queued: 0 })

  // A request placed on the first model, admitted after the swap, is told so instead of answered by another model.
  await assert.rejects(answer(engine, HELLO, { modelID: 'first' }), (err: unknown) => err instanceof ModelSwappedError && err.wanted === 'first')
  assert.equal((await engine.tokenize('hello', { modelID: 'second' })).length > 0, true)
  await assert.rejects(engine.tokenize('hello', { modelID: 'first' }), ModelSwappedError)
})

test('requests waiting for a swap are bounded by the queue size, and leave it when aborted', async (t) => {
  const { engine, second } = await twoModels(t, { queueSize: 1 })
  const running = answer(engine, { ...HELLO, maxTokens: 200 })
  await new Promise((resolve) => setImmediate(resolve))
  const swapping = engine.load('second', second, { whenIdle: true })
  await new Promise((resolve) => setImmediate(resolve))
  const controller = new AbortController()
  const waiting = answer(engine, HELLO, { signal: controller.signal })
  await new Promise((resolve) => setImmediate(resolve))
  await assert.rejects(answer(engine, HELLO), QueueFullError)
  const reason = new Error('gave up')
  controller.abort(reason)
  await assert.rejects(waiting, (err) => err === reason)
  assert.equal(engine.stats().queued, 0)
  await running
  await swapping
  assert.equal((await answer(engine, HELLO)).completionTokens, 6)
})
