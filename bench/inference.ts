// bench:inference — tokens/s and time to first token through the HTTP API (SSE, as an OpenAI client sees it)
// against node-llama-cpp called directly, in the same run, with 1 and 4 concurrent streams. The HTTP client runs in a
// worker thread, as a separate program would. Method: bench/README.md.
import { existsSync } from 'node:fs'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Worker } from 'node:worker_threads'
import { LlamaChat, resolveChatWrapper, type ChatHistoryItem } from 'node-llama-cpp'
import { defaultConfig } from '../src/config.ts'
import { getSharedLlama } from '../src/inference/index.ts'
import { startNode } from '../src/node.ts'
import { writeTinyGguf } from '../test/support/tiny-gguf.ts'

const MAX_TOKENS = Number(process.env.BENCH_MAX_TOKENS ?? 128)
const RUNS = Number(process.env.BENCH_RUNS ?? 3)
const THREADS = 1 // measured best on the 2-core reference machine (shared/models/README.md)
const PROMPT = 'Once upon a time, in a small village by the sea, there lived a fisherman who'

interface Sample { ttftMs: number, tokens: number, seconds: number }
interface Summary { streams: number, tokensPerSecond: number, ttftMs: number }

function median (values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b)
  return sorted[Math.floor(sorted.length / 2)]
}

async function benchDirect (path: string, streams: number): Promise<Summary> {
  const llama = await getSharedLlama(THREADS)
  const model = await llama.loadModel({ modelPath: path })
  const context = await model.createContext({ sequences: streams, contextSize: Math.min(2048, model.trainContextSize), threads: THREADS })
  const chatWrapper = resolveChatWrapper(model)
  const chats = Array.from({ length: streams }, () => new LlamaChat({ contextSequence: context.getSequence(), chatWrapper }))
  const history: ChatHistoryItem[] = [{ type: 'user', text: PROMPT }, { type: 'model', response: [] }]
  const results: Summary[] = []
  for (let run = 0; run < RUNS; run++) {
    const started = performance.now()
    const samples = await Promise.all(chats.map(async (chat): Promise<Sample> => {
      await chat.sequence.clearHistory()
      let first = 0
      const before = chat.sequence.tokenMeter.getState()
      await chat.generateResponse(history, {
        maxTokens: MAX_TOKENS, temperature: 0, repeatPenalty: false,
        onTextChunk: () => { if (first === 0) first = performance.now() }
      })
      const tokens = chat.sequence.tokenMeter.diff(before).usedOutputTokens
      return { ttftMs: first - started, tokens, seconds: (performance.now() - started) / 1000 }
    }))
    results.push(summarise(samples, streams, (performance.now() - started) / 1000))
  }
  for (const chat of chats) chat.dispose()
  await context.dispose()
  await model.dispose()
  return { streams, tokensPerSecond: median(results.map((r) => r.tokensPerSecond)), ttftMs: median(results.map((r) => r.ttftMs)) }
}

async function benchHttp (path: string, streams: number, dataDir: string): Promise<Summary> {
  const node = await startNode(defaultConfig({ port: 0, dataDir, logLevel: 'warn', threads: THREADS, slots: streams, contextSize: 2048 }))
  try {
    await node.engine.load('bench', path)
    const results: Summary[] = []
    const worker = new Worker(join(import.meta.dirname, 'sse-client.ts'))
    for (let run = -1; run < RUNS; run++) { // run -1 warms the worker and the server up
      const body = {
        model: 'bench', messages: [{ role: 'user', content: PROMPT }], max_tokens: MAX_TOKENS, temperature: 0,
        frequency_penalty: 0, presence_penalty: 0, stream: true, stream_options: { include_usage: true }
      }
      worker.postMessage({ url: `${node.url}/v1/chat/completions`, body, streams })
      const { samples, wallSeconds } = await new Promise<{ samples: Sample[], wallSeconds: number }>((resolve, reject) => {
        worker.once('message', resolve)
        worker.once('error', reject)
      })
      if (run >= 0) results.push(summarise(samples, streams, wallSeconds))
    }
    await worker.terminate()
    return { streams, tokensPerSecond: median(results.map((r) => r.tokensPerSecond)), ttftMs: median(results.map((r) => r.ttftMs)) }
  } finally {
    await node.close()
  }
}

function summarise (samples: Sample[], streams: number, wallSeconds: number): Summary {
  const tokens = samples.reduce((sum, s) => sum + s.tokens, 0)
  return { streams, tokensPerSecond: Math.round(tokens / wallSeconds), ttftMs: Math.round(median(samples.map((s) => s.ttftMs)) * 10) / 10 }
}

const scratch = await mkdtemp(join(tmpdir(), 'meshnode-bench-'))
try {
  const shared = join(import.meta.dirname, '..', '..', 'shared', 'models')
  const models: Array<[string, string]> = []
  for (const file of ['random-llama-24M-q8_0.gguf', 'stories260K.gguf']) {
    if (existsSync(join(shared, file))) models.push([file, join(shared, file)])
  }
  if (models.length === 0) {
    const tiny = await writeTinyGguf(join(scratch, 'tiny.gguf'), { seed: 1 })
    models.push(['generated tiny llama (../shared/models not found)', tiny.path])
  }
  const rows: string[] = []
  for (const [name, path] of models) {
    for (const streams of [1, 4]) {
      // Warm-up once per shape, then alternate direct and HTTP so drift hits both alike.
      await benchDirect(path, streams)
      const direct = await benchDirect(path, streams)
      const http = await benchHttp(path, streams, join(scratch, `node-${streams}`))
      const ratio = Math.round(http.tokensPerSecond / direct.tokensPerSecond * 100) / 100
      rows.push(`| ${name} | ${streams} | ${direct.tokensPerSecond} | ${http.tokensPerSecond} | ${ratio} | ${direct.ttftMs} | ${http.ttftMs} |`)
      console.error(rows.at(-1))
    }
  }
  console.log(`\nmax_tokens ${MAX_TOKENS}, ${RUNS} runs (median), threads ${THREADS}, greedy\n`)
  console.log('| model | streams | direct tok/s | HTTP tok/s | HTTP/direct | direct TTFT ms | HTTP TTFT ms |')
  console.log('|---|---:|---:|---:|---:|---:|---:|')
  for (const row of rows) console.log(row)
} finally {
  await rm(scratch, { recursive: true, force: true })
}
