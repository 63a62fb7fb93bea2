// bench:several-models — a RAG application's traffic through the HTTP API: chat requests on one model interleaved with
// embeddings requests on another, against the same requests on one model that does both, and against a node that
// holds one model at a time (--max-loaded-models 1, the swap per alternation the node made before it held several).
// Prints the wall time of each run, the loads it caused, and the node's RSS with one model loaded and with two.
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { defaultConfig } from '../src/config.ts'
import { startNode, type RunningNode } from '../src/node.ts'
import { writeTinyGguf } from '../test/support/tiny-gguf.ts'

const REQUESTS = Number(process.env.BENCH_REQUESTS ?? 100)
const CHAT_MODEL = process.env.BENCH_CHAT_MODEL ?? join(import.meta.dirname, '../../shared/models/random-llama-24M-q8_0.gguf')

async function post (node: RunningNode, path: string, body: unknown): Promise<void> {
  const res = await fetch(`${node.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) })
  if (!res.ok) throw new Error(`${path}: HTTP ${res.status} ${await res.text()}`)
  await res.arrayBuffer()
}

/** `REQUESTS` requests, alternating a short chat on `chat` and an embeddings request on `embed`, one after another. */
async function interleaved (node: RunningNode, chat: string, embed: string): Promise<{ ms: number, loads: number }> {
  let loads = 0
  const count = (): void => { loads++ }
  node.models.events.on('model.loaded', count)
  const started = performance.now()
  for (let i = 0; i < REQUESTS; i++) {
    if (i % 2 === 0) await post(node, '/v1/chat/completions', { model: chat, messages: [{ role: 'user', content: `question ${i}` }], max_tokens: 8, temperature: 0 })
    else await post(node, '/v1/embeddings', { model: embed, input: [`a passage to index, number ${i}`] })
  }
  const ms = performance.now() - started
  node.models.events.off('model.loaded', count)
  return { ms, loads }
}

async function withNode<T> (options: { maxLoadedModels: number }, run: (node: RunningNode, ids: { chat: string, embed: string }) => Promise<T>): Promise<T> {
  const dir = await mkdtemp(join(tmpdir(), 'meshnode-bench-models-'))
  const node = await startNode(defaultConfig({ port: 0, dataDir: dir, logLevel: 'silent', threads: 1, maxLoadedModels: options.maxLoadedModels }))
  try {
    const embedFile = await writeTinyGguf(join(dir, 'embed.gguf'), { seed: 5, pooling: true })
    const chat = (await node.models.import(CHAT_MODEL, 'bench-chat')).modelID
    const embed = (await node.models.import(embedFile.path, 'bench-embed')).modelID
    return await run(node, { chat, embed })
  } finally {
    await node.close()
    await rm(dir, { recursive: true, force: true })
  }
}

function rssMB (): number {
  return Math.round(process.memoryUsage().rss / 1024 / 1024)
}

const two = await withNode({ maxLoadedModels: 3 }, async (node, { chat, embed }) => {
  await post(node, '/v1/chat/completions', { model: chat, messages: [{ role: 'user', content: 'warm up' }], max_tokens: 2 })
  const oneModelRss = rssMB()
  await post(node, '/v1/embeddings', { model: embed, input: ['warm up'] })
  const twoModelsRss = rssMB()
  return { ...(await interleaved(node, chat, embed)), oneModelRss, twoModelsRss }
})
const one = await withNode({ maxLoadedModels: 3 }, async (node, { chat }) => {
  await post(node, '/v1/chat/completions', { model: chat, messages: [{ role: 'user', content: 'warm up' }], max_tokens: 2 })
  await post(node, '/v1/embeddings', { model: chat, input: ['warm up'] })
  return await interleaved(node, chat, chat)
})
const swapping = await withNode({ maxLoadedModels: 1 }, async (node, { chat, embed }) => {
  await post(node, '/v1/chat/completions', { model: chat, messages: [{ role: 'user', content: 'warm up' }], max_tokens: 2 })
  return await interleaved(node, chat, embed)
})

console.log(`${REQUESTS} interleaved requests (chat of 8 tokens on ${CHAT_MODEL.split('/').at(-1) ?? ''}, embeddings on a tiny embedding model), one after another:`)
console.log('| node | wall time | loads during the run |')
console.log('|---|---|---|')
console.log(`| two models loaded side by side | ${(two.ms / 1000).toFixed(2)} s | ${two.loads} |`)
console.log(`| one model doing both | ${(one.ms / 1000).toFixed(2)} s | ${one.loads} |`)
console.log(`| one model at a time (--max-loaded-models 1) | ${(swapping.ms / 1000).toFixed(2)} s | ${swapping.loads} |`)
console.log(`RSS of the process: ${two.oneModelRss} MB with the chat model loaded, ${two.twoModelsRss} MB with both`)
