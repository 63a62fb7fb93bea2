import { test } from 'node:test'
import type { TestContext } from 'node:test'
import assert from 'node:assert/strict'
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import {
  InvalidGenerationRequestError, LocalEngine, ModelLoadError, NoModelLoadedError, QueueFullError,
  type ChatEvent, type ChatRequest, type GenerateOptions, type LocalEngineOptions
} from '../../src/inference/index.ts'
import { RELEASED_TOKENIZER_KEYS } from '../../src/inference/patches/node-llama-cpp.ts'
import { resolveFlashAttention } from '../../src/inference/flash-attention.ts'
import { readGgufFileInfo } from 'node-llama-cpp'
import { TINY_GGUF_CONTEXT_LENGTH, writeTinyGguf } from '../support/tiny-gguf.ts'

// The tiny model never ends an answer by itself (its end tokens are never the likeliest), so maxTokens bounds every
// generation here, and a generation without maxTokens runs until the context is full.

async function tempDir (t: TestContext): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'meshnode-inference-'))
  t.after(() => rm(dir, { recursive: true, force: true }))
  return dir
}

const HELLO: ChatRequest = { messages: [{ role: 'user', content: 'hello there' }], temperature: 0, maxTokens: 24 }

async function startEngine (t: TestContext, options: LocalEngineOptions = {}): Promise<LocalEngine> {
  const { path } = await writeTinyGguf(join(await tempDir(t), 'tiny.gguf'), { seed: 1 })
  const engine = new LocalEngine({}, { threads: 1, ...options })
  t.after(() => engine.close())
  await engine.load('tiny', path)
  return engine
}

interface Answer { deltas: string[], text: string, done: Extract<ChatEvent, { type: 'done' }> }

async function answer (engine: LocalEngine, request: ChatRequest, options?: GenerateOptions): Promise<Answer> {
  const deltas: string[] = []
  let done: Answer['done'] | undefined
  for await (const event of engine.generate(request, options)) {
    assert.equal(done, undefined, 'nothing may follow the done event')
    if (event.type === 'delta') deltas.push(event.text)
    else if (event.type === 'done') done = event
  }
  assert.ok(done != null, 'the stream ended without a done event')
  return { deltas, text: deltas.join(''), done }
}

/** Reads the rest of a stream whose first events a test took by hand. */
async function drain (events: AsyncIterator<ChatEvent>): Promise<void> {
  while ((await events.next()).done !== true);
}

await test('streams deltas while generating, then done with real token counts', async (t) => {
  const engine = await startEngine(t, { slots: 1 })
  const deltas: string[] = []
  let busyAtFirstDelta: number | undefined
  let done: ChatEvent | undefined
  for await (const event of engine.generate(HELLO)) {
    if (event.type === 'delta') {
      busyAtFirstDelta ??= engine.stats().busySlots
      deltas.push(event.text)
    } else {
      done = event
    }
  }
  assert.equal(busyAtFirstDelta, 1, 'the first delta arrived while the generation still held its slot')
  assert.ok(deltas.length > 1, `expected several deltas, got ${deltas.length}`)
  assert.ok(deltas.every((d) => d.length > 0))
  assert.ok(done?.type === 'done')
  assert.equal(done.finishReason, 'length')
  assert.equal(done.usage.completionTokens, 24)
  assert.ok(done.usage.promptTokens > 5, 'the prompt is counted as the chat template renders it')
  assert.equal(done.usage.totalTokens, done.usage.promptTokens + 24)
  assert.deepEqual(engine.stats(), { slots: 1, busySlots: 0, queued: 0 })
})

await test('maxTokens ends the answer with finishReason length after exactly that many tokens', async (t) => {
  const engine = await startEngine(t)
  for (const maxTokens of [1, 7]) {
    const { done } = await answer(engine, { ...HELLO, maxTokens })
    assert.equal(done.finishReason, 'length')
    assert.equal(done.usage.completionTokens, maxTokens)
  }
})

await test('without maxTokens the answer fills the context: prompt and completion tokens add up to it', async (t) => {
  const engine = await startEngine(t)
  const info = engine.loaded()
  assert.equal(info?.contextLength, TINY_GGUF_CONTEXT_LENGTH)
  const { done } = await answer(engine, { ...HELLO, maxTokens: null })
  assert.equal(done.finishReason, 'length')
  assert.equal(done.usage.promptTokens + done.usage.completionTokens, TINY_GGUF_CONTEXT_LENGTH)
  assert.equal(done.usage.totalTokens, TINY_GGUF_CONTEXT_LENGTH)
  // a larger maxTokens than the context holds is capped, not refused
  const capped = await answer(engine, { ...HELLO, maxTokens: 100_000 })
  assert.equal(capped.done.usage.totalTokens, TINY_GGUF_CONTEXT_LENGTH)
})

await test('a stop string ends the answer and is not part of it', async (t) => {
  const engine = await startEngine(t)
  const free = await answer(engine, { ...HELLO, maxTokens: 40 })
  // greedy decoding repeats itself exactly, so a word from the free answer is where the stopped one must end
  const words = free.text.split(' ').filter((word) => word.length >= 3)
  const stop = words[Math.floor(words.length / 2)]
  const at = free.text.indexOf(stop)
  assert.ok(at > 0, `no usable stop word in ${JSON.stringify(free.text)}`)
  const stopped = await answer(engine, { ...HELLO, maxTokens: 40, stop: ['never appears', stop] })
  assert.equal(stopped.done.finishReason, 'stop')
  assert.equal(stopped.text, free.text.slice(0, at))
  assert.ok(!stopped.text.includes(stop))
})

await test('temperature 0, or a seed, gives the same text on every run and every slot', async (t) => {
  const engine = await startEngine(t, { slots: 2 })
  const greedy = await answer(engine, HELLO)
  assert.equal((await answer(engine, HELLO)).text, greedy.text)

  const seeded: ChatRequest = { ...HELLO, temperature: 1, seed: 42 }
  // side by side, so the two land on different slots, each after earlier requests used it
  const [first, second] = await Promise.all([answer(engine, seeded), answer(engine, seeded)])
  assert.equal(first.text, second.text)
  assert.equal((await answer(engine, seeded)).text, first.text)
  assert.notEqual((await answer(engine, { ...seeded, seed: 43 })).text, first.text, 'another seed, another text')
  // any integer is a seed; -1 must not become llama.cpp's "random seed" marker 0xFFFFFFFF
  const minusOne = { ...seeded, seed: -1 }
  assert.equal((await answer(engine, minusOne)).text, (await answer(engine, minusOne)).text)
})

await test('json_schema output parses and matches the schema; json_object output is JSON so far', async (t) => {
  const engine = await startEngine(t)
  const schema = { type: 'object', properties: { a: { type: 'integer' } }, required: ['a'] }
  const structured = await answer(engine, { ...HELLO, maxTokens: 64, responseFormat: { type: 'json_schema', schema } })
  assert.equal(structured.done.finishReason, 'stop', 'the grammar completed the object')
  const value = JSON.parse(structured.text)
  assert.deepEqual(Object.keys(value), ['a'])
  assert.ok(Number.isInteger(value.a))

  // the tiny model writes an endless string key, so all we can check within a few tokens is the start
  const loose = await answer(engine, { ...HELLO, maxTokens: 8, responseFormat: { type: 'json_object' } })
  assert.match(loose.text, /^\s*\{/)
})

await test('requests the engine cannot serve as asked are refused before they take a slot', async (t) => {
  const engine = await startEngine(t, { slots: 1 })
  const refusals: Array<[ChatRequest, string]> = [
    [{ messages: [] }, 'messages'],
    [{ ...HELLO, temperature: 3 }, 'temperature'],
    [{ ...HELLO, maxTokens: 0 }, 'maxTokens'],
    [{ ...HELLO, stop: [''] }, 'stop'],
    [{ ...HELLO, responseFormat: { type: 'json_schema', schema: { type: 'string', pattern: '^(a+)+$' } } }, 'responseFormat.json_schema.schema.pattern'],
    [{ ...HELLO, responseFormat: { type: 'json_schema', schema: { type: 'banana' } } }, 'responseFormat.json_schema.schema.type'],
    [{ messages: [{ role: 'user', content: 'hello '.repeat(TINY_GGUF_CONTEXT_LENGTH) }] }, 'messages']
  ]
  for (const [request, param] of refusals) {
    await assert.rejects(answer(engine, request), (err: unknown) => {
      assert.ok(err instanceof InvalidGenerationRequestError, String(err))
      assert.equal(err.param, param)
      return true
    })
  }
  assert.deepEqual(engine.stats(), { slots: 1, busySlots: 0, queued: 0 })
  assert.equal((await answer(engine, HELLO)).done.usage.completionTokens, 24, 'the engine still serves')
})

await test('aborting a running generation frees its slot for the queued request at once', async (t) => {
  const engine = await startEngine(t, { slots: 1 })
  const controller = new AbortController()
  const running = engine.generate({ ...HELLO, maxTokens: null }, { signal: controller.signal })[Symbol.asyncIterator]()
  const firstEvent = running.next()
  const queued = answer(engine, HELLO) // asks for the one slot in the same tick, so it must wait behind
  assert.equal((await firstEvent).value?.type, 'delta')
  assert.deepEqual(engine.stats(), { slots: 1, busySlots: 1, queued: 1 })

  const reason = new Error('client went away')
  controller.abort(reason)
  await assert.rejects(drain(running), (err) => err === reason)
  assert.equal(engine.stats().queued, 0, 'the queued request had the slot by the time the aborted one threw')
  const { done } = await queued
  assert.equal(done.usage.completionTokens, 24)
  assert.deepEqual(engine.stats(), { slots: 1, busySlots: 0, queued: 0 })
})

await test('aborting while queued leaves the queue, and an aborted signal is refused up front', async (t) => {
  const engine = await startEngine(t, { slots: 1 })
  const holder = new AbortController()
  const running = engine.generate({ ...HELLO, maxTokens: null }, { signal: holder.signal })[Symbol.asyncIterator]()
  const firstEvent = running.next()
  const waiting = new AbortController()
  const queued = answer(engine, HELLO, { signal: waiting.signal })
  await firstEvent
  assert.equal(engine.stats().queued, 1)
  const reason = new Error('gave up waiting')
  waiting.abort(reason)
  await assert.rejects(queued, (err) => err === reason)
  assert.equal(engine.stats().queued, 0)

  await assert.rejects(answer(engine, HELLO, { signal: AbortSignal.abort(reason) }), (err) => err === reason)
  const done = new Error('done with it')
  holder.abort(done)
  await assert.rejects(drain(running), (err) => err === done)
  assert.deepEqual(engine.stats(), { slots: 1, busySlots: 0, queued: 0 })
})

await test('leaving the stream early stops the generation and frees the slot; the next request reuses it', async (t) => {
  const engine = await startEngine(t, { slots: 1 })
  let seen = 0
  for await (const event of engine.generate({ ...HELLO, maxTokens: null })) {
    assert.equal(event.type, 'delta')
    if (++seen === 2) break
  }
  assert.deepEqual(engine.stats(), { slots: 1, busySlots: 0, queued: 0 })
  const reused = await answer(engine, HELLO)
  assert.equal(reused.done.usage.completionTokens, 24)
  assert.equal(reused.text, (await answer(engine, HELLO)).text, 'no state of the abandoned request bleeds in')
})

await test('with every slot busy and the queue full, the next request gets QueueFullError', async (t) => {
  const engine = await startEngine(t, { slots: 1, queueSize: 1 })
  const holder = new AbortController()
  const running = engine.generate({ ...HELLO, maxTokens: null }, { signal: holder.signal })[Symbol.asyncIterator]()
  const firstEvent = running.next()
  const queued = answer(engine, HELLO)
  await firstEvent
  await assert.rejects(answer(engine, HELLO), (err: unknown) => {
    assert.ok(err instanceof QueueFullError, String(err))
    assert.ok(err.retryAfterSeconds > 0)
    return true
  })
  assert.deepEqual(engine.stats(), { slots: 1, busySlots: 1, queued: 1 }, 'the refused request changed nothing')
  const makeRoom = new Error('make room')
  holder.abort(makeRoom)
  await assert.rejects(drain(running), (err) => err === makeRoom)
  assert.equal((await queued).done.usage.completionTokens, 24)
})

await test('two slots serve two requests side by side', async (t) => {
  const engine = await startEngine(t, { slots: 2 })
  let bothBusy = false
  const watch = async (request: ChatRequest): Promise<Answer> => {
    const deltas: string[] = []
    let done: Answer['done'] | undefined
    for await (const event of engine.generate(request)) {
      if (engine.stats().busySlots === 2) bothBusy = true
      if (event.type === 'delta') deltas.push(event.text)
      else if (event.type === 'done') done = event
    }
    assert.ok(done != null)
    return { deltas, text: deltas.join(''), done }
  }
  const [a, b] = await Promise.all([watch({ ...HELLO, maxTokens: 30 }), watch({ ...HELLO, maxTokens: 31 })])
  assert.equal(a.done.usage.completionTokens, 30)
  assert.equal(b.done.usage.completionTokens, 31)
  assert.ok(bothBusy, 'both generations ran at the same time')
  assert.ok(b.text.startsWith(a.text), 'same greedy answer, one token longer')
})

await test('load adds a model beside the loaded one: its running generation goes on, and each answers by name', async (t) => {
  const engine = await startEngine(t, { slots: 1 })
  const otherTiny = await writeTinyGguf(join(await tempDir(t), 'other-tiny.gguf'), { seed: 2 })
  const before = await answer(engine, HELLO)
  const running = engine.generate({ ...HELLO, maxTokens: 200 }, { modelID: 'tiny' })[Symbol.asyncIterator]()
  await running.next()

  const info = await engine.load('other-tiny', otherTiny.path)
  assert.deepEqual(info, engine.loaded('other-tiny'))
  assert.equal(info.modelID, 'other-tiny')
  assert.equal(info.sizeBytes, otherTiny.sizeBytes)
  assert.equal(info.chatTemplate, 'ChatML')
  assert.equal(engine.loaded()?.modelID, 'other-tiny', 'without a name: the model used most recently, here the one just loaded')
  await drain(running)
  assert.deepEqual(engine.loadedModels().map((model) => model.modelID).sort(), ['other-tiny', 'tiny'])

  const after = await answer(engine, HELLO, { modelID: 'other-tiny' })
  assert.equal(after.done.usage.completionTokens, 24)
  assert.notEqual(after.text, before.text, 'other weights, other greedy answer')
  assert.equal((await answer(engine, HELLO, { modelID: 'tiny' })).text, before.text)
})

await test('without a model, generate throws NoModelLoadedError', async (t) => {
  const engine = new LocalEngine({}, { threads: 1 })
  t.after(() => engine.close())
  await assert.rejects(answer(engine, HELLO), NoModelLoadedError)
  assert.equal(engine.loaded(), null)
  assert.deepEqual(engine.stats(), { slots: 2, busySlots: 0, queued: 0 })

  const { path } = await writeTinyGguf(join(await tempDir(t), 'tiny.gguf'))
  await engine.load('tiny', path)
  await engine.unload()
  assert.equal(engine.loaded(), null)
  await assert.rejects(answer(engine, HELLO), NoModelLoadedError)
})

await test('a missing or non-GGUF file is refused with ModelLoadError while the loaded model keeps serving', async (t) => {
  const engine = await startEngine(t)
  const dir = await tempDir(t)
  const notGguf = join(dir, 'not.gguf')
  await writeFile(notGguf, 'this is not a model')
  for (const [modelID, path] of [['missing', join(dir, 'missing.gguf')], ['not-gguf', notGguf]]) {
    await assert.rejects(engine.load(modelID, path), (err: unknown) => {
      assert.ok(err instanceof ModelLoadError, String(err))
      assert.equal(err.modelID, modelID)
      return true
    })
    assert.equal(engine.loaded()?.modelID, 'tiny')
  }
  assert.equal((await answer(engine, HELLO)).done.usage.completionTokens, 24)
})

await test('a GGUF whose tensors are cut off fails to load and leaves the loaded models as they were', async (t) => {
  const engine = await startEngine(t)
  const dir = await tempDir(t)
  const whole = await readFile((await writeTinyGguf(join(dir, 'whole.gguf'))).path)
  const truncated = join(dir, 'truncated.gguf')
  await writeFile(truncated, whole.subarray(0, Math.floor(whole.length * 0.8)))
  await assert.rejects(engine.load('truncated', truncated), ModelLoadError)
  assert.equal(engine.loaded('truncated'), null)
  assert.deepEqual(engine.loadedModels().map((model) => model.modelID), ['tiny'], 'the loaded model stays')
  assert.equal((await answer(engine, HELLO)).done.usage.completionTokens, 24)
})

await test('flash attention: auto is off on the CPU and llama.cpp\'s own choice on a GPU; on and off are obeyed', () => {
  assert.equal(resolveFlashAttention('auto', true), false, 'auto on the CPU')
  assert.equal(resolveFlashAttention('auto', false), 'auto', 'auto on a GPU')
  for (const onCpu of [true, false]) {
    assert.equal(resolveFlashAttention('on', onCpu), true, `on, ${onCpu ? 'CPU' : 'GPU'}`)
    assert.equal(resolveFlashAttention('off', onCpu), false, `off, ${onCpu ? 'CPU' : 'GPU'}`)
  }
})

await test('a loaded model keeps no JavaScript copy of its tokenizer\'s scores, token types or merges, and still generates', async (t) => {
  const { path } = await writeTinyGguf(join(await tempDir(t), 'tiny.gguf'), { seed: 1 })
  const inFile = (await readGgufFileInfo(path, { sourceType: 'filesystem', readTensorInfo: false })).metadata.tokenizer.ggml as unknown as Record<string, unknown[]>
  assert.ok(Array.isArray(inFile.scores) && Array.isArray(inFile.token_type), 'the file has them (so that their release is seen)')
  const engine = new LocalEngine({}, { threads: 1 })
  t.after(() => engine.close())
  await engine.load('tiny', path)
  const kept = (engine as unknown as { models: Map<string, { parts: { model: { fileInfo: { metadata: { tokenizer: { ggml: Record<string, unknown> } } } } } }> })
    .models.get('tiny')?.parts.model.fileInfo.metadata.tokenizer.ggml
  assert.ok(kept != null)
  for (const key of RELEASED_TOKENIZER_KEYS) assert.equal(kept[key], undefined, key)
  assert.deepEqual(kept.tokens, inFile.tokens, 'the tokens stay: their count is the vocabulary\'s size')
  const done = (await answer(engine, { ...HELLO, logitBias: { [inFile.tokens.length - 1]: 5 } })).done
  assert.equal(done.usage.completionTokens, 24, 'generates, with a logit bias checked against the vocabulary')
  await assert.rejects(answer(engine, { ...HELLO, logitBias: { [inFile.tokens.length]: 5 } }), InvalidGenerationRequestError)
})

await test('flashAttention reaches llama.cpp\'s context as chosen, every choice generates, and an unknown one is refused', async (t) => {
  // The context and model are the engine's own; node-llama-cpp's getters report what the engine asked llama.cpp for:
  // the generation context's setting, and the model's default, which the embedding context takes.
  type Instance = { context: { flashAttention: boolean | 'auto' } | null, parts: { model: { defaultContextFlashAttention: boolean | 'auto' } } }
  const instanceOf = (engine: LocalEngine): Instance => {
    const instance = (engine as unknown as { models: Map<string, Instance> }).models.values().next().value
    assert.ok(instance != null)
    return instance
  }
  const contextOf = (engine: LocalEngine): { flashAttention: boolean | 'auto' } => {
    const context = instanceOf(engine).context
    assert.ok(context != null, 'the generation context, made by the first chat')
    return context
  }
  const modelOf = (engine: LocalEngine): { defaultContextFlashAttention: boolean | 'auto' } => instanceOf(engine).parts.model
  const { path: wide } = await writeTinyGguf(join(await tempDir(t), 'one-head.gguf'), { seed: 1, oneHead: true })
  // `auto` on the CPU: off for generation whatever the heads (64 in the one-head model, 16 in the default tiny one),
  // llama.cpp's own choice for embeddings, which only evaluate prompts
  for (const [choice, oneHead, generation, embeddings] of [['auto', true, false, 'auto'], ['auto', false, false, 'auto'], ['on', false, true, true], ['on', true, true, true], ['off', true, false, false]] as const) {
    const engine = oneHead ? new LocalEngine({}, { threads: 1, flashAttention: choice }) : await startEngine(t, { flashAttention: choice })
    if (oneHead) await engine.load('one-head', wide)
    const label = `${choice}, heads of ${oneHead ? 64 : 16}`
    assert.equal((await answer(engine, HELLO)).done.usage.completionTokens, 24, label)
    assert.equal(contextOf(engine).flashAttention, generation, label)
    assert.equal(modelOf(engine).defaultContextFlashAttention, embeddings, `${label}: the embedding context's default`)
    const vectors: number[][] = []
    for await (const event of engine.embed({ input: ['hello'] })) if (event.type === 'embedding') vectors.push(event.vector)
    assert.ok(vectors.length === 1 && vectors[0].length > 0 && vectors[0].every(Number.isFinite), `${label}: an embedding`)
    await engine.close()
  }
  const byDefault = new LocalEngine({}, { threads: 1 })
  t.after(() => byDefault.close())
  await byDefault.load('one-head', wide)
  await answer(byDefault, HELLO)
  assert.equal(contextOf(byDefault).flashAttention, false, 'the default, auto, is off on the CPU')
  assert.throws(() => new LocalEngine({}, { flashAttention: 'fast' as 'on' }), /flashAttention must be one of auto, on, off, got fast/)
})

await test('the tokenizer thread a large text started stays while a model is loaded, and ends with the last one', async (t) => {
  const { path } = await writeTinyGguf(join(await tempDir(t), 'tiny.gguf'), { seed: 1, contextLength: 16_384 })
  const engine = new LocalEngine({}, { threads: 1, contextSize: 16_384 })
  t.after(() => engine.close())
  await engine.load('tiny', path)
  // The engine's own thread, read as it is: only its running state is looked at.
  const thread = (engine as unknown as { tokenizerThread: { running: boolean } }).tokenizerThread
  const large = 'hello there '.repeat(3_000) // 36 kB: over what is tokenized on the event loop
  const tokens = await engine.tokenize(large)
  assert.ok(tokens.length > 1_000)
  assert.equal(thread.running, true)
  assert.deepEqual(await engine.tokenize(large), tokens, 'the same thread answers again, alike')
  assert.equal(thread.running, true, 'no time without work ends it while its model is loaded')
  await engine.unload()
  assert.equal(thread.running, false, 'with no model left it ends, and gives its memory back')
})
