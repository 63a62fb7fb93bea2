// bench:flash-attention — what llama.cpp's flash attention costs on the CPU, with node-llama-cpp's prebuilt library as
// meshnode runs it, deep in a context: for random-weight models whose heads are 48, 64, 96 and 128 values wide, a
// prompt of BENCH_DEPTH tokens evaluated from nothing, then twice a turn of 107 new tokens and 8 tokens decoded after
// it, in two contexts of 32k, one with flash attention off and one with it on (a thread each, one sequence), the
// prompts evaluated at the same time and the turns taken in turn. The engine alone: no HTTP, no chat template. What
// `--flash-attention auto` does with it: src/inference/flash-attention.ts; results: bench/README.md.
import { join } from 'node:path'
import { getLlama, type LlamaModel, type Token } from 'node-llama-cpp'
import { BENCH_CACHE } from './llama-server-build.ts'
import { median, text } from './processes.ts'
import { ensureRandomLlama, SHAPES, type ShapeName } from './random-gguf.ts'

const DEPTH = Number(process.env.BENCH_DEPTH ?? 7_400)
const THREADS = Number(process.env.BENCH_THREADS ?? 1)
const CONTEXT = 32_768
const TURN_TOKENS = 107 // a turn of bench:agent: a fixed answer and a user message, with the chat template's tokens
const DECODED = 8
const MODELS = (process.env.BENCH_MODELS ?? '24M,135M,head96,head128').split(',') as ShapeName[]
for (const shape of MODELS) if (!(shape in SHAPES)) throw new Error(`BENCH_MODELS: ${shape} is not one of ${Object.keys(SHAPES).join(', ')}`)
const TOKENIZER_FROM = join(import.meta.dirname, '..', '..', 'shared', 'models', 'random-llama-24M-q8_0.gguf')

interface Run { coldMs: number, turnMs: number[], tokenMs: number[] }

/**
 * One context with flash attention off and one with it on, their prompts evaluated at the same time (a thread each),
 * then their turns and decodes taken in turn, the order alternating, so that the machine's drift falls on both alike.
 */
async function measure (model: LlamaModel, prefix: Token[], turns: Token[][]): Promise<{ off: Run, on: Run }> {
  const contexts = await Promise.all([false, true].map(async (flashAttention) => await model.createContext({ contextSize: CONTEXT, sequences: 1, threads: THREADS, flashAttention })))
  try {
    const sequences = contexts.map((context) => context.getSequence())
    const [off, on] = await Promise.all(sequences.map(async (sequence): Promise<Run> => {
      const started = performance.now()
      await sequence.evaluateWithoutGeneratingNewTokens(prefix)
      return { coldMs: performance.now() - started, turnMs: [], tokenMs: [] }
    }))
    for (const [round, turn] of turns.entries()) {
      for (const i of round % 2 === 0 ? [0, 1] : [1, 0]) {
        const run = i === 0 ? off : on
        const sequence = sequences[i]
        const started = performance.now()
        await sequence.evaluateWithoutGeneratingNewTokens(turn)
        run.turnMs.push(performance.now() - started)
        // The first token comes from the turn's own evaluation; each one after it is one decode at this depth.
        let decoded = 0
        let last = performance.now()
        for await (const token of sequence.evaluate([turn[0]])) {
          void token
          const now = performance.now()
          if (decoded > 0) run.tokenMs.push(now - last)
          last = now
          if (++decoded > DECODED) break
        }
      }
    }
    return { off, on }
  } finally {
    for (const context of contexts) await context.dispose()
  }
}

const llama = await getLlama({ gpu: false, maxThreads: 2 * THREADS })
const rows: string[] = []
for (const shape of MODELS) {
  const path = await ensureRandomLlama(join(BENCH_CACHE, `random-llama-${shape}-shape-32k-q8_0.gguf`), TOKENIZER_FROM, shape, CONTEXT)
  const model = await llama.loadModel({ modelPath: path })
  try {
    const prefix = model.tokenize(text(Math.ceil(DEPTH * 1.25), 1)).slice(0, DEPTH)
    const turns = [7, 8].map((seed) => model.tokenize(text(TURN_TOKENS, seed)).slice(0, TURN_TOKENS))
    if (prefix.length < DEPTH || turns.some((turn) => turn.length < TURN_TOKENS)) throw new Error('the filler text made too few tokens')
    const head = SHAPES[shape].embedding / SHAPES[shape].heads
    const { off, on } = await measure(model, prefix, turns)
    const ms = (value: number): string => Math.round(value).toLocaleString('en-US')
    for (const [name, run] of [['off', off], ['on', on]] as const) {
      console.error(`  ${shape} (heads of ${head}), ${name}: cold ${ms(run.coldMs)} ms, turns ${run.turnMs.map(ms).join(' / ')} ms, ` +
        `a token ${run.tokenMs.map(ms).join(' ')} ms`)
    }
    const ratio = (a: number, b: number): string => `${(a / b).toFixed(2)}×`
    rows.push(`| ${shape} | ${head} | ${ms(off.coldMs)} / ${ms(on.coldMs)} (${ratio(on.coldMs, off.coldMs)}) | ` +
      `${ms(median(off.turnMs))} / ${ms(median(on.turnMs))} (${ratio(median(on.turnMs), median(off.turnMs))}) | ` +
      `${median(off.tokenMs).toFixed(0)} / ${median(on.tokenMs).toFixed(0)} (${ratio(median(on.tokenMs), median(off.tokenMs))}) |`)
  } finally {
    await model.dispose()
  }
}
console.log(`\nbench:flash-attention — ${DEPTH} tokens into a context of ${CONTEXT}, ${THREADS} thread(s); off / on, and on as a multiple of off`)
console.log('| model | head size | cold prompt ms (both at once) | a 107-token turn ms (median of 2) | a decoded token ms (median of 16) |')
console.log('|---|---:|---:|---:|---:|')
for (const row of rows) console.log(row)
