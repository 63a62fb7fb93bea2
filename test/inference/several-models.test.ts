// Several models loaded side by side in one engine: a request for one never waits for another's, nor fails because
// another was loaded; eviction takes the least recently used idle model loaded for a request and never one with a
// request in flight; unload takes one model or all, once their requests are done; the keep-alive unloads models
// loaded for requests; a model that cannot fit is refused before loading; an embedding model only embeds.
import { test } from 'node:test'
import type { TestContext } from 'node:test'
import assert from 'node:assert/strict'
import { join } from 'node:path'
import {
  InvalidGenerationRequestError, LocalEngine, ModelSwappedError, ModelTooLargeError, type ChatEvent, type ChatRequest, type GenerateOptions,
  type LocalEngineOptions
} from '../../src/inference/index.ts'
import { tempDir, waitFor } from '../support/node.ts'
import { writeTinyGguf, type TinyGgufOptions } from '../support/tiny-gguf.ts'

const HELLO: ChatRequest = { messages: [{ role: 'user', content: 'hello there' }], temperature: 0, maxTokens: 6 }
const LONG: ChatRequest = { ...HELLO, maxTokens: 400 }

async function models (t: TestContext, shapes: Record<string, TinyGgufOptions>): Promise<Record<string, string>> {
  const dir = await tempDir(t, 'meshnode-several-')
  const paths: Record<string, string> = {}
  let seed = 1
  for (const [name, shape] of Object.entries(shapes)) paths[name] = (await writeTinyGguf(join(dir, `${name}.gguf`), { seed: seed++, contextLength: 2048, ...shape })).path
  return paths
}

function engineFor (t: TestContext, options: LocalEngineOptions = {}): LocalEngine {
  const engine = new LocalEngine({}, { threads: 1, slots: 1, ...options })
  t.after(() => engine.close())
  return engine
}

async function answer (engine: LocalEngine, request: ChatRequest, options?: GenerateOptions, onDelta?: () => void): Promise<{ text: string, completionTokens: number }> {
  let text = ''
  let done: Extract<ChatEvent, { type: 'done' }> | undefined
  for await (const event of engine.generate(request, options)) {
    if (event.type === 'delta') {
      text += event.text
      onDelta?.()
    } else if (event.type === 'done') done = event
  }
  assert.ok(done != null)
  return { text, completionTokens: done.usage.completionTokens }
}

async function embedding (engine: LocalEngine, modelID: string, input: string[]): Promise<number[][]> {
  const vectors: number[][] = []
  for await (const event of engine.embed({ input }, { modelID })) if (event.type === 'embedding') vectors.push(event.vector)
  return vectors
}

/** Resolves once the generation has streamed its first delta (it holds its slot from then on). */
function streaming (engine: LocalEngine, request: ChatRequest, options: GenerateOptions): { started: Promise<void>, done: Promise<{ text: string, completionTokens: number }> } {
  let started!: () => void
  const first = new Promise<void>((resolve) => { started = resolve })
  return { started: first, done: answer(engine, request, options, () => { started() }) }
}

test('two models at once: embeddings on one are answered while a long chat on the other streams, which completes; both stay loaded', async (t) => {
  const paths = await models(t, { chat: {}, embed: { pooling: true } })
  const engine = engineFor(t)
  await engine.load('chat', paths.chat)
  await engine.load('embed', paths.embed)
  const chat = streaming(engine, LONG, { modelID: 'chat' })
  await chat.started
  const vectors = await embedding(engine, 'embed', ['the first text', 'another one'])
  assert.equal(vectors.length, 2)
  assert.equal(engine.loadedModels().find((model) => model.modelID === 'chat')?.busySlots, 1, 'the chat was still running when the embeddings came back')
  assert.equal((await chat.done).completionTokens, 400, 'the chat was not cut')
  assert.deepEqual(engine.loadedModels().map((model) => model.modelID).sort(), ['chat', 'embed'])
})

test('an embedding model gets no chat slots and refuses chats and completions with a 400 that says so', async (t) => {
  const paths = await models(t, { embed: { pooling: true }, chat: {} })
  const engine = engineFor(t)
  const info = await engine.load('embed', paths.embed)
  assert.equal(info.kind, 'embedding')
  assert.equal(info.slots, 0)
  assert.equal((await engine.load('chat', paths.chat)).kind, 'chat')
  await assert.rejects(answer(engine, HELLO, { modelID: 'embed' }), (err: unknown) => err instanceof InvalidGenerationRequestError && /embedding model/.test(err.message))
  const completion = async (): Promise<number> => {
    let events = 0
    for await (const event of engine.complete({ prompt: 'the', maxTokens: 2 }, { modelID: 'embed' })) events += event.type === 'done' ? 1 : 0
    return events
  }
  await assert.rejects(completion(), InvalidGenerationRequestError)
  assert.equal((await embedding(engine, 'embed', ['a text'])).length, 1)
  // a chat model embeds too, without making its chat slots
  assert.equal((await embedding(engine, 'chat', ['a text'])).length, 1)
})

test('with two at most, a third model evicts the least recently used idle one loaded for a request, never one with a request in flight', async (t) => {
  const paths = await models(t, { a: {}, b: {}, c: {}, d: {} })
  const engine = engineFor(t, { maxLoadedModels: 2 })
  let most = 0
  const unloaded: Array<{ modelID: string, reason: string }> = []
  engine.on('loaded', () => { most = Math.max(most, engine.loadedModels().length) })
  engine.on('unloaded', (event) => { unloaded.push(event) })
  await engine.load('a', paths.a, { reason: 'request' })
  await engine.load('b', paths.b, { reason: 'request' })
  await answer(engine, HELLO, { modelID: 'b' })
  await answer(engine, HELLO, { modelID: 'a' }) // b is now the least recently used
  const running = streaming(engine, LONG, { modelID: 'b' })
  await running.started
  // b is the least recently used but busy: a goes
  await engine.load('c', paths.c, { reason: 'request' })
  assert.deepEqual(unloaded, [{ modelID: 'a', reason: 'evicted' }])
  assert.deepEqual(engine.loadedModels().map((model) => model.modelID).sort(), ['b', 'c'])
  // Both busy: the next load waits for one to finish, then evicts it
  const other = streaming(engine, LONG, { modelID: 'c' })
  await other.started
  let loadedD = false
  const loadingD = engine.load('d', paths.d, { reason: 'request' }).then(() => { loadedD = true })
  assert.equal((await running.done).completionTokens, 400)
  assert.equal((await other.done).completionTokens, 400)
  await loadingD
  assert.ok(loadedD)
  assert.ok(most <= 2, `at most 2 loaded, saw ${most}`)
  assert.equal(engine.loadedModels().length, 2)
  assert.ok(unloaded.every((event) => event.reason === 'evicted'))
})

test('an explicitly loaded model stays while one loaded for a request is evicted, unless nothing else makes room', async (t) => {
  const paths = await models(t, { pinned: {}, passing: {}, next: {}, last: {} })
  const engine = engineFor(t, { maxLoadedModels: 2 })
  await engine.load('pinned', paths.pinned)
  await engine.load('passing', paths.passing, { reason: 'request' })
  await answer(engine, HELLO, { modelID: 'passing' })
  await engine.load('next', paths.next, { reason: 'request' }) // pinned is older, but explicit
  assert.deepEqual(engine.loadedModels().map((model) => model.modelID).sort(), ['next', 'pinned'])
  // Explicit loads fill the count: then an explicit one goes, the least recently used
  await engine.load('next', paths.next) // now explicit too
  await engine.load('last', paths.last, { reason: 'request' })
  assert.deepEqual(engine.loadedModels().map((model) => model.modelID).sort(), ['last', 'next'])
})

test('unload names one model and unloads only it, after its running generation; with no name, every model', async (t) => {
  const paths = await models(t, { a: {}, b: {} })
  const engine = engineFor(t)
  await engine.load('a', paths.a)
  await engine.load('b', paths.b)
  const running = streaming(engine, LONG, { modelID: 'a' })
  await running.started
  const unloading = engine.unload('a')
  // While a waits for its generation, a request naming it finds it gone (the router loads it again), and b serves
  await new Promise((resolve) => setImmediate(resolve))
  await assert.rejects(answer(engine, HELLO, { modelID: 'a' }), ModelSwappedError)
  assert.equal((await answer(engine, HELLO, { modelID: 'b' })).completionTokens, 6)
  assert.equal((await running.done).completionTokens, 400, 'the running generation was not cut')
  assert.deepEqual(await unloading, ['a'])
  assert.deepEqual(engine.loadedModels().map((model) => model.modelID), ['b'])
  assert.deepEqual(await engine.unload('a'), [], 'unloading a model that is not loaded does nothing')
  await engine.load('a', paths.a)
  assert.deepEqual((await engine.unload()).sort(), ['a', 'b'])
  assert.equal(engine.loadedModels().length, 0)
})

test('keep-alive 0 unloads a model loaded for a request right after it; an explicitly loaded one stays', async (t) => {
  const paths = await models(t, { wanted: {}, pinned: {} })
  const engine = engineFor(t, { keepAliveMs: 0 })
  const unloaded: Array<{ modelID: string, reason: string }> = []
  engine.on('unloaded', (event) => { unloaded.push(event) })
  await engine.load('pinned', paths.pinned)
  await engine.load('wanted', paths.wanted, { reason: 'request' })
  assert.equal((await answer(engine, HELLO, { modelID: 'wanted' })).completionTokens, 6)
  await waitFor(() => unloaded.length > 0, { timeoutMs: 60_000, what: 'the model loaded for the request to be unloaded' })
  assert.deepEqual(unloaded, [{ modelID: 'wanted', reason: 'idle' }])
  assert.equal(engine.loaded('wanted'), null)
  await answer(engine, HELLO, { modelID: 'pinned' })
  await new Promise((resolve) => setTimeout(resolve, 200))
  assert.equal(engine.loaded('pinned')?.modelID, 'pinned', 'the explicit one stays')
})

test('keep-alive: a model loaded for a request leaves once idle that long; -1 keeps it', async (t) => {
  const paths = await models(t, { wanted: {} })
  const engine = engineFor(t, { keepAliveMs: 300 })
  await engine.load('wanted', paths.wanted, { reason: 'request' })
  await answer(engine, HELLO, { modelID: 'wanted' })
  await waitFor(() => engine.loaded('wanted') == null, { timeoutMs: 60_000, what: 'the idle model to be unloaded' })

  const keeping = engineFor(t, { keepAliveMs: -1 })
  await keeping.load('wanted', paths.wanted, { reason: 'request' })
  await answer(keeping, HELLO, { modelID: 'wanted' })
  await new Promise((resolve) => setTimeout(resolve, 500))
  assert.equal(keeping.loadedModels().length, 1)
})

test('a model too large for the memory budget is refused before loading, naming both sizes; the others keep serving', async (t) => {
  const dir = await tempDir(t, 'meshnode-budget-')
  const small = (await writeTinyGguf(join(dir, 'small.gguf'), { contextLength: 512 })).path
  const probe = engineFor(t)
  const smallBytes = (await probe.load('small', small)).memoryBytes
  const large = join(import.meta.dirname, '../../../shared/models/random-llama-24M-q8_0.gguf')
  const largeBytes = (await probe.load('large', large)).memoryBytes
  assert.ok(largeBytes > 2 * smallBytes, `the 24M model's estimate (${largeBytes}) is well above the tiny one's (${smallBytes})`)
  await probe.close()

  const budget = Math.round(smallBytes * 1.5)
  const engine = engineFor(t, { memoryBudgetBytes: budget })
  await engine.load('small', small)
  await assert.rejects(engine.load('large', large), (err: unknown) => {
    assert.ok(err instanceof ModelTooLargeError, String(err))
    assert.equal(err.neededBytes, largeBytes)
    assert.equal(err.availableBytes, budget)
    assert.match(err.message, /MiB.*more than the .*MiB the memory budget/)
    return true
  })
  assert.deepEqual(engine.loadedModels().map((model) => model.modelID), ['small'], 'nothing was evicted for it')
  assert.equal((await answer(engine, HELLO, { modelID: 'small' })).completionTokens, 6)
})
