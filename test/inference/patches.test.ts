import { test } from 'node:test'
import type { TestContext } from 'node:test'
import assert from 'node:assert/strict'
import { mkdir, mkdtemp, readFile, readdir, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'
import { LlamaChat, LlamaCompletion, type BatchItem, type CustomBatchingPrioritizationStrategy, type GbnfJsonSchema, type LlamaContext, type LlamaModel, type Token } from 'node-llama-cpp'
import { getSharedLlama, gpuPackages, LocalEngine, nodeLlamaCppPatches, v8Patches, warnInactivePatches, type PatchReport } from '../../src/inference/index.ts'
import { SequenceOrderedBatching } from '../../src/inference/batching.ts'
import { compactHeap } from '../../src/inference/heap.ts'
import {
  INTEGER_GRAMMAR, NUMBER_GRAMMAR, prebuiltBinaryImports, redirectPrebuiltBinaries, RELEASED_TOKENIZER_KEYS, releaseTokenizerArrays, SamplingError,
  tokenLoopInternals
} from '../../src/inference/patches/node-llama-cpp.ts'
import { garbageCollector } from '../../src/inference/patches/v8.ts'
import { failSamplingOnce } from '../support/sampling-fault.ts'
import { writeTinyGguf } from '../support/tiny-gguf.ts'

// Each patch meshnode makes to a dependency's private internals (src/inference/patches/, docs/UPGRADING.md) is
// active at the pinned version, and does what it exists for, on the generated tiny GGUF. After an upgrade of
// node-llama-cpp or Node, a patch that no longer finds the shape it was written for reports itself inactive; its test
// here then fails, naming what it found, instead of the node quietly losing a crash guard or its fast token loop.

const root = join(import.meta.dirname, '..', '..')
const nodeLlamaCppDist = join(root, 'node_modules', 'node-llama-cpp', 'dist')

async function pinnedNodeLlamaCpp (): Promise<string> {
  const manifest = JSON.parse(await readFile(join(root, 'package.json'), 'utf8')) as { dependencies: Record<string, string> }
  return manifest.dependencies['node-llama-cpp']
}

async function report (name: string): Promise<PatchReport> {
  const found = (await nodeLlamaCppPatches()).find((patch) => patch.name === name)
  assert.ok(found != null, `node-llama-cpp has a patch named ${name}`)
  return found
}

/** The patch took: its report says so, and if not, says what it found instead. */
async function assertActive (name: string): Promise<void> {
  const patch = await report(name)
  assert.equal(patch.active, true, `${name} did not apply to ${patch.dependency}: ${patch.detail ?? ''}`)
}

async function tinyModel (t: TestContext, contextLength = 1024): Promise<{ path: string, model: LlamaModel }> {
  const dir = await mkdtemp(join(tmpdir(), 'meshnode-patches-'))
  t.after(() => rm(dir, { recursive: true, force: true }))
  const { path } = await writeTinyGguf(join(dir, 'tiny.gguf'), { seed: 1, contextLength })
  const llama = await getSharedLlama(1)
  const model = await llama.loadModel({ modelPath: path })
  t.after(() => model.dispose())
  return { path, model }
}

await test('every patch of node-llama-cpp is reported, active, against the pinned version', async () => {
  const reports = await nodeLlamaCppPatches()
  assert.deepEqual(reports.map((patch) => patch.name), [
    'sampling-guard', 'erasures-take-the-lock', 'json-number-grammar', 'defs-registered-once', 'token-loop',
    'batch-sequence-order', 'tokenizer-arrays-released', 'prebuilt-binary-redirect'
  ])
  const pinned = await pinnedNodeLlamaCpp()
  for (const patch of reports) {
    assert.equal(patch.dependency, `node-llama-cpp ${pinned}`)
    assert.ok(patch.reason.length > 0, `${patch.name} says why it exists`)
    assert.equal(patch.active, true, `${patch.name}: ${patch.detail ?? ''}`)
  }
})

await test('every patch of V8 is reported, active, on the pinned Node', () => {
  const reports = v8Patches()
  assert.deepEqual(reports.map((patch) => patch.name), ['expose-gc'])
  for (const patch of reports) assert.equal(patch.active, true, `${patch.name}: ${patch.detail ?? ''}`)
})

await test('a patch that did not apply is warned of once, naming what it found; one that applied says nothing', () => {
  const warned: Array<{ obj: Record<string, unknown>, msg?: string }> = []
  warnInactivePatches({ warn: (obj, msg) => { warned.push({ obj: obj as Record<string, unknown>, msg }) } }, [
    { name: 'sampling-guard', dependency: 'node-llama-cpp 9.0.0', reason: 'the process may end', active: false, detail: 'LlamaContextSequence._decodeTokens is gone' },
    { name: 'token-loop', dependency: 'node-llama-cpp 9.0.0', reason: 'slower tokens', active: true }
  ])
  assert.equal(warned.length, 1)
  assert.equal(warned[0].obj.patch, 'sampling-guard')
  assert.equal(warned[0].obj.detail, 'LlamaContextSequence._decodeTokens is gone')
  assert.match(warned[0].msg ?? '', /sampling-guard .*node-llama-cpp 9\.0\.0.*did not apply: the process may end/)
})

await test('sampling-guard: a sampler failure in a shared batch ends only its own generation, with SamplingError', async (t) => {
  await assertActive('sampling-guard')
  const { model } = await tinyModel(t)
  const context = await model.createContext({ sequences: 2, contextSize: 256, threads: 1 })
  t.after(() => context.dispose())
  // The fault llama.cpp's sampler raises ("Failed to accept token in sampler"), as a rejected native sampleToken, on
  // the fourth token sampled: without the guard it is an unhandled rejection in node-llama-cpp's batch loop, which
  // ends this process, and the generation it hit never settles.
  failSamplingOnce(t, context, 4)
  const outcomes = await Promise.allSettled([context.getSequence(), context.getSequence()].map(async (sequence) =>
    await new LlamaCompletion({ contextSequence: sequence }).generateCompletion('Once upon', { maxTokens: 12, temperature: 0 })))
  const failed = outcomes.filter((outcome) => outcome.status === 'rejected')
  assert.equal(failed.length, 1, 'one generation failed, the other finished')
  assert.ok(failed[0].reason instanceof SamplingError, String(failed[0].reason))
  assert.match(failed[0].reason.message, /injected by the test/)
})

await test('erasures-take-the-lock: clearing a sequence does not wait for the generations on the others', async (t) => {
  await assertActive('erasures-take-the-lock')
  const { model } = await tinyModel(t)
  const context = await model.createContext({ sequences: 4, contextSize: 1024, threads: 1 })
  t.after(() => context.dispose())
  const [cleared, ...generating] = [context.getSequence(), context.getSequence(), context.getSequence(), context.getSequence()]
  await cleared.evaluateWithoutGeneratingNewTokens(model.tokenize('a sequence holding a few tokens to erase'))
  // Three long generations: node-llama-cpp's batch loop holds the context's lock while any decode is queued, and with
  // three streams one always is
  let running = generating.length
  const started: Array<Promise<void>> = []
  const long = generating.map(async (sequence, i) => {
    let first: () => void = () => undefined
    started.push(new Promise((resolve) => { first = resolve }))
    let tokens = 0
    for await (const token of sequence.evaluate(model.tokenize(`tell me everything, ${i}`), { temperature: 0 })) {
      assert.equal(typeof token, 'number')
      if (++tokens === 1) first()
      if (tokens >= 900) break
    }
    running--
  })
  await Promise.all(started)
  await cleared.clearHistory()
  assert.equal(running, 3, 'the clear finished while all three generations still ran')
  assert.equal(cleared.nextTokenIndex, 0)
  await Promise.all(long)
})

await test('json-number-grammar: a JSON schema\'s integers have no exponent and its numbers a bounded one, and parse as such', async (t) => {
  await assertActive('json-number-grammar')
  const { model } = await tinyModel(t)
  const llama = await getSharedLlama(1)
  const grammar = await llama.createGrammarForJsonSchema({ type: 'object', properties: { n: { type: 'integer' }, x: { type: 'number' } } } as const)
  assert.ok(grammar.grammar.includes(`::= ${INTEGER_GRAMMAR}\n`), grammar.grammar)
  assert.ok(grammar.grammar.includes(`::= ${NUMBER_GRAMMAR}\n`), grammar.grammar)
  const context = await model.createContext({ sequences: 1, contextSize: 512, threads: 1 })
  t.after(() => context.dispose())
  const sequence = context.getSequence()
  const completion = new LlamaCompletion({ contextSequence: sequence })
  for (const seed of [0, 1, 2, 3]) {
    await sequence.clearHistory()
    const text = await completion.generateCompletion('Numbers: ', { grammar, maxTokens: 200, temperature: 1, seed })
    const value = JSON.parse(text) as { n: number, x: number }
    assert.ok(Number.isSafeInteger(value.n), `${text}: n is a safe integer`)
    assert.ok(Number.isFinite(value.x), `${text}: x is finite`)
  }
})

await test('defs-registered-once: a schema\'s definitions are registered once, not again at every node, and the grammar is the same', async () => {
  await assertActive('defs-registered-once')
  const llama = await getSharedLlama(1)
  const file = new URL('./utils/gbnfJson/GbnfGrammarGenerator.js', import.meta.resolve('node-llama-cpp')).href
  const { GbnfGrammarGenerator } = await import(file) as { GbnfGrammarGenerator: new () => { defScopeDefs: object } }
  // Every registration is a write to the generator's maps (MultiKeyMap, not exported either): counted while the
  // grammar is written
  const maps = Object.getPrototypeOf(new GbnfGrammarGenerator().defScopeDefs) as { set: (...args: unknown[]) => unknown }
  const set = maps.set
  let writes = 0
  maps.set = function (this: unknown, ...args: unknown[]) { writes++; return set.apply(this, args) }
  const defs = 300
  const schema = {
    type: 'object',
    properties: Object.fromEntries(Array.from({ length: defs }, (_, i) => [`p${i}`, { $ref: `#/$defs/d${i}` }])),
    $defs: Object.fromEntries(Array.from({ length: defs }, (_, i) => [`d${i}`, { type: 'object', properties: { v: { type: 'array', items: { type: 'string' } } } }]))
  }
  let text: string
  try {
    text = (await llama.createGrammarForJsonSchema<GbnfJsonSchema>(schema as GbnfJsonSchema)).grammar
  } finally {
    maps.set = set
  }
  // Without the patch: one write per definition at each of the ~1,500 nodes, about 450,000
  assert.ok(writes < 10 * defs, `${writes} map writes for ${defs} definitions`)
  // Every property is written, each with its definition's rule
  const properties = [...text.matchAll(/"\\"p(\d+)\\"" ":" \[ \]\? (\S+)/g)]
  assert.equal(properties.length, defs, 'every property is in the grammar')
  assert.ok(properties.every(([, , rule]) => new RegExp(`^${rule} ::= `, 'm').test(text)), 'each names a rule the grammar defines')
})

await test('token-loop: a plain chat runs on our own loop, never on LlamaChat or LlamaCompletion', async (t) => {
  await assertActive('token-loop')
  assert.notEqual(await tokenLoopInternals(), null)
  const { path } = await tinyModel(t)
  let theirs = 0
  const { generateResponse } = LlamaChat.prototype
  const { generateCompletionWithMeta } = LlamaCompletion.prototype
  LlamaChat.prototype.generateResponse = async function (this: LlamaChat, ...args: Parameters<LlamaChat['generateResponse']>) {
    theirs++
    return await generateResponse.apply(this, args)
  }
  LlamaCompletion.prototype.generateCompletionWithMeta = async function (this: LlamaCompletion, ...args: Parameters<LlamaCompletion['generateCompletionWithMeta']>) {
    theirs++
    return await generateCompletionWithMeta.apply(this, args)
  }
  t.after(() => {
    LlamaChat.prototype.generateResponse = generateResponse
    LlamaCompletion.prototype.generateCompletionWithMeta = generateCompletionWithMeta
  })
  const engine = new LocalEngine({}, { threads: 1, slots: 2 })
  t.after(() => engine.close())
  await engine.load('tiny', path)
  const answers = await Promise.all([0, 1].map(async (i) => {
    let text = ''
    for await (const event of engine.generate({ messages: [{ role: 'user', content: `hello ${i}` }], temperature: 0, maxTokens: 16 })) {
      if (event.type === 'delta') text += event.text
      if (event.type === 'done') return { text, completionTokens: event.usage.completionTokens }
    }
    throw new Error('no done event')
  }))
  for (const answer of answers) assert.equal(answer.completionTokens, 16)
  assert.equal(theirs, 0, 'node-llama-cpp\'s own generation classes did not run')
})

await test('batch-sequence-order: a batch of several sequences is decoded in sequence order, whatever order they queued in', async (t) => {
  await assertActive('batch-sequence-order')
  const { model } = await tinyModel(t)
  const batching = new SequenceOrderedBatching()
  const strategy = batching.options.itemPrioritizationStrategy as CustomBatchingPrioritizationStrategy
  const batches: Array<{ items: readonly BatchItem[], order: readonly BatchItem[] }> = []
  // Dispatched on the next turn (node-llama-cpp's own "nextCycle"), so that all three evaluations are queued by then
  const context: LlamaContext = await model.createContext({
    sequences: 3,
    contextSize: 256,
    threads: 1,
    batching: {
      dispatchSchedule: 'nextCycle',
      itemPrioritizationStrategy: (options) => {
        const batch = strategy(options)
        if (batch.length > 0) batches.push({ items: [...options.items], order: batch.map((entry) => entry.item) })
        return batch
      }
    }
  })
  t.after(() => context.dispose())
  batching.attach(context)
  const sequences = [context.getSequence(), context.getSequence(), context.getSequence()]
  // Prompts of 3, 5 and 7 tokens tell the items apart; queued last sequence first
  const lengths = [3, 5, 7]
  const prompt = (length: number): Token[] => model.tokenize('one two three four five six seven eight nine ten').slice(0, length)
  for (const length of lengths) assert.equal(prompt(length).length, length)
  await Promise.all([2, 1, 0].map(async (i) => { await sequences[i].evaluateWithoutGeneratingNewTokens(prompt(lengths[i])) }))
  const together = batches.find((batch) => batch.items.length === 3)
  assert.ok(together != null, `the three prompts went into one batch (batches: ${batches.map((b) => b.items.length).join(', ')})`)
  assert.deepEqual(together.items.map((item) => item.tokens.length), [7, 5, 3], 'queued as sequences 2, 1, 0')
  assert.deepEqual(together.order.map((item) => item.tokens.length), [3, 5, 7], 'decoded as sequences 0, 1, 2')
})

await test('tokenizer-arrays-released: a loaded model lets go of its tokenizer\'s arrays, which node-llama-cpp never reads again', async (t) => {
  await assertActive('tokenizer-arrays-released')
  const { model } = await tinyModel(t)
  const ggml = model.fileInfo.metadata.tokenizer.ggml as unknown as Record<string, unknown>
  assert.ok(Array.isArray(ggml.scores) && Array.isArray(ggml.token_type), 'the tiny GGUF has them, so that their release is seen')
  const tokens = ggml.tokens
  releaseTokenizerArrays(model)
  for (const key of RELEASED_TOKENIZER_KEYS) assert.equal(ggml[key], undefined, key)
  assert.equal(ggml.tokens, tokens, 'the tokens stay: their count is the vocabulary\'s size')
  // What the release relies on: no code of node-llama-cpp's reads these arrays, however it reaches the metadata
  const readers: string[] = []
  for (const entry of await readdir(nodeLlamaCppDist, { recursive: true, withFileTypes: true })) {
    if (!entry.isFile() || !entry.name.endsWith('.js')) continue
    const file = join(entry.parentPath, entry.name)
    const source = await readFile(file, 'utf8')
    if (/\b(?:merges|token_type|precompiled_charsmap)\b|ggml\??\.(?:\[")?scores\b/.test(source)) readers.push(file)
  }
  assert.deepEqual(readers, [], 'node-llama-cpp files that read a released array')
  const context = await model.createContext({ sequences: 1, contextSize: 256, threads: 1 })
  t.after(() => context.dispose())
  const text = await new LlamaCompletion({ contextSequence: context.getSequence() }).generateCompletion('Once upon', { maxTokens: 8, temperature: 0 })
  assert.ok(text.length > 0, 'the model still generates')
})

await test('expose-gc: V8\'s collector is reached, takes its options, and gives the heap\'s pages back', async () => {
  assert.equal(v8Patches().every((patch) => patch.active), true)
  const collect = garbageCollector()
  assert.ok(collect != null)
  // V8 reads the options (an unknown one would be ignored, giving a plain collection): an async one returns a promise
  // (of the context the collector came from, so not an instance of this one's Promise)
  const pending = collect({ type: 'minor', execution: 'async' }) as PromiseLike<void> | undefined
  assert.equal(typeof pending?.then, 'function', 'this V8 reads gc()\'s options')
  await pending
  assert.equal(compactHeap(), true)
})

// Last: the hook it registers is the process's, for the rest of this file's run
await test('prebuilt-binary-redirect: node-llama-cpp loads a GPU package from where `meshnode gpu install` put it', async (t) => {
  await assertActive('prebuilt-binary-redirect')
  const imported = prebuiltBinaryImports()
  for (const [platform, arch] of [['linux', 'x64'], ['win32', 'x64'], ['darwin', 'arm64']] as const) {
    for (const backend of ['cuda', 'vulkan', 'metal'] as const) {
      for (const name of gpuPackages(backend, platform, arch) ?? []) assert.ok(imported.includes(name), `node-llama-cpp imports ${name} by name`)
    }
  }
  const name = gpuPackages('vulkan')?.[0]
  if (name == null) {
    t.skip(`node-llama-cpp has no Vulkan build for ${process.platform}-${process.arch}`)
    return
  }
  // node-llama-cpp's own check of a binary package, at the very import it makes; in node_modules is only our stub
  const { checkWhetherPrebuiltBinariesModuleIsInstalled } = await import(pathToFileURL(join(nodeLlamaCppDist, 'bindings', 'utils', 'compileLLamaCpp.js')).href) as
    { checkWhetherPrebuiltBinariesModuleIsInstalled: (gpu: string) => Promise<boolean> }
  assert.equal(await checkWhetherPrebuiltBinariesModuleIsInstalled('vulkan'), false, 'the stub is no binary package')
  const dir = await mkdtemp(join(tmpdir(), 'meshnode-gpu-'))
  t.after(() => rm(dir, { recursive: true, force: true }))
  await mkdir(join(dir, 'dist'))
  const entry = join(dir, 'dist', 'index.js')
  await writeFile(entry, `export function getBinsDir () { return { binsDir: ${JSON.stringify(join(dir, 'bins'))}, packageVersion: ${JSON.stringify(await pinnedNodeLlamaCpp())} } }\n`)
  redirectPrebuiltBinaries(new Map([[name, pathToFileURL(entry).href]]))
  assert.equal(await checkWhetherPrebuiltBinariesModuleIsInstalled('vulkan'), true, `node-llama-cpp's import of ${name} reaches the installed package`)
})
