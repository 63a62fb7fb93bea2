// What each layer of node-llama-cpp costs per generated token, below meshnode: one process, one sequence, 1 thread,
// greedy, the same prompts, the three ways interleaved request by request.
//   addon:    its native addon driven directly (initBatch, addToBatch, decodeBatch, sampleToken: two native calls per
//             token and nothing else), through private fields of node-llama-cpp 3.22 (`context._ctx`,
//             `llama._bindings`). The floor any JavaScript driver of these bindings can reach; meshnode's token loop
//             (src/inference/token-loop.ts) queues its decodes one level up, on node-llama-cpp's context.
//   loop:     meshnode's own token loop (src/inference/token-loop.ts), what it runs for plain chats and completions.
//   evaluate: `sequence.evaluate(tokens)`, node-llama-cpp's token generator (its batch loop, locks, sampler config).
//   chat:     `LlamaChat.generateResponse`, what meshnode runs for tools and grammars (chat template, stop detection, text
//             chunks).
// Each request is timed from its tokens to its 128th generated token, prompt included (a short one, ~36 tokens).
//   node bench/engine-layers.ts [model.gguf]      BENCH_FLASH_ATTENTION=auto|on|off (default auto), BENCH_ROUNDS=3
import { getLlama, LlamaChat, resolveChatWrapper, type Token } from 'node-llama-cpp'
import { FLASH_ATTENTION_CHOICES, llamaFlashAttention, type FlashAttention } from '../src/inference/index.ts'
import { llamaInternals } from '../src/inference/llama.ts'
import { planSampling } from '../src/inference/sampling.ts'
import { runTokenLoop } from '../src/inference/token-loop.ts'

const modelPath = process.argv[2] ?? new URL('../../shared/models/random-llama-24M-q8_0.gguf', import.meta.url).pathname
const flashAttentionSetting = (process.env.BENCH_FLASH_ATTENTION ?? 'auto') as FlashAttention
if (!FLASH_ATTENTION_CHOICES.includes(flashAttentionSetting)) throw new Error(`BENCH_FLASH_ATTENTION must be one of ${FLASH_ATTENTION_CHOICES.join(', ')}, not ${flashAttentionSetting}`)
const flashAttention = llamaFlashAttention(flashAttentionSetting)
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3)
const REQUESTS = 12
const TOKENS = 128

interface AddonContext {
  initBatch (size: number): void
  addToBatch (sequenceId: number, firstTokenIndex: number, tokens: Uint32Array, logitIndexes: Uint32Array): Uint32Array
  decodeBatch (): Promise<void>
  sampleToken (batchLogitIndex: number, sampler: unknown): Promise<number>
  removeTokenCellsFromSequence (sequenceId: number, start: number, end: number): boolean
}

const llama = await getLlama({ gpu: false, build: 'never', maxThreads: 1, progressLogs: false })
const model = await llama.loadModel({ modelPath })
const context = await model.createContext({ sequences: 1, contextSize: 2048, threads: 1, flashAttention })
const sequence = context.getSequence()
const chat = new LlamaChat({ contextSequence: sequence, chatWrapper: resolveChatWrapper(model) })
const addon = (context as unknown as { _ctx: AddonContext })._ctx
const bindings = (llama as unknown as { _bindings: { AddonSampler: new (model: unknown) => { applyConfig (config: object): void } } })._bindings
const sampler = new bindings.AddonSampler((model as unknown as { _model: unknown })._model)
sampler.applyConfig({ temperature: 0 })

const question = (i: number): string => `Tell me a story, number ${i}`
const rendered = (i: number): Token[] => model.tokenize(`<|im_start|>user\n${question(i)}<|im_end|>\n<|im_start|>assistant\n`, true)

async function viaAddon (i: number): Promise<number> {
  await sequence.clearHistory()
  const started = performance.now()
  const prompt = rendered(i)
  addon.initBatch(prompt.length)
  let logits = addon.addToBatch(0, 0, Uint32Array.from(prompt), Uint32Array.of(prompt.length - 1))
  let position = prompt.length
  for (let n = 0; n < TOKENS; n++) {
    await addon.decodeBatch()
    const token = await addon.sampleToken(logits[0], sampler)
    model.detokenize([token as Token]) // as the other two do for every token
    addon.initBatch(1)
    logits = addon.addToBatch(0, position++, Uint32Array.of(token), Uint32Array.of(0))
  }
  const ms = performance.now() - started
  addon.removeTokenCellsFromSequence(0, 0, -1)
  return ms
}

const internals = await llamaInternals() ?? (() => { throw new Error('node-llama-cpp\'s internals changed: the token loop cannot run') })()
const { sampling } = await planSampling({ temperature: 0 }, model, TOKENS)
const running = new AbortController().signal

async function viaLoop (i: number): Promise<number> {
  await sequence.clearHistory()
  const started = performance.now()
  await runTokenLoop(sequence, { tokens: rendered(i), sampling, maxTokens: TOKENS, stopTriggers: [], internals }, () => {}, running)
  return performance.now() - started
}

async function viaEvaluate (i: number): Promise<number> {
  await sequence.clearHistory()
  const started = performance.now()
  let n = 0
  for await (const token of sequence.evaluate(rendered(i), { temperature: 0 })) {
    model.detokenize([token])
    if (++n >= TOKENS) break
  }
  return performance.now() - started
}

async function viaChat (i: number): Promise<number> {
  await sequence.clearHistory()
  const started = performance.now()
  await chat.generateResponse([{ type: 'user', text: question(i) }, { type: 'model', response: [] }],
    { maxTokens: TOKENS, temperature: 0, repeatPenalty: false, onTextChunk: () => {} })
  return performance.now() - started
}

const median = (values: number[]): number => [...values].sort((a, b) => a - b)[values.length >> 1]
console.log(`${modelPath.split('/').at(-1)}, flash attention ${flashAttentionSetting}: ms per request of ${TOKENS} tokens (median of ${REQUESTS})`)
for (let round = 0; round < ROUNDS; round++) {
  const times: Record<'addon' | 'loop' | 'evaluate' | 'chat', number[]> = { addon: [], loop: [], evaluate: [], chat: [] }
  for (let i = 0; i < REQUESTS; i++) {
    times.chat.push(await viaChat(i))
    times.addon.push(await viaAddon(i))
    times.loop.push(await viaLoop(i))
    times.evaluate.push(await viaEvaluate(i))
  }
  const [addonMs, loopMs, evaluateMs, chatMs] = [median(times.addon), median(times.loop), median(times.evaluate), median(times.chat)]
  console.log(`round ${round + 1}: addon ${addonMs.toFixed(0)}, loop ${loopMs.toFixed(0)}, evaluate ${evaluateMs.toFixed(0)}, chat ${chatMs.toFixed(0)}; ` +
    `chat costs ${((chatMs - addonMs) / TOKENS * 1000).toFixed(0)} µs/token more than the addon loop`)
}
chat.dispose()
await context.dispose()
await model.dispose()
await llama.dispose()
