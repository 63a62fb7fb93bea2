// bench:llama-server — meshnode against llama-server (built from the llama.cpp node-llama-cpp ships) and against
// node-llama-cpp called directly, same GGUF, 1 thread, rounds interleaved: 1- and 4-stream decode, a long prompt's
// time to first token, a 6-turn chat that resends its history every turn, peak RSS. Each engine runs in its own
// process so its memory is its own; the one light SSE client (bench/sse-client.ts) reads both HTTP servers.
// Method and results: bench/README.md. Never run by tests or CI: the first run builds llama-server (~15-30 min).
import { spawn, type ChildProcess } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { mkdtemp, rm } from 'node:fs/promises'
import { loadavg, tmpdir } from 'node:os'
import { join } from 'node:path'
import { FLASH_ATTENTION_CHOICES, type FlashAttention } from '../src/inference/index.ts'
import type { DirectJob, DirectResult } from './direct-engine.ts'
import { serveEnvironment } from '../bin/serve-env.js'
import { BENCH_CACHE, ensureLlamaServer, LLAMA_SERVER_BUILDS, type LlamaServerBuild } from './llama-server-build.ts'
import { check, median, startLlamaServer, startMeshnode, text, track } from './processes.ts'
import { ensureRandom135M } from './random-gguf.ts'
import { streamChat, type ChatStreamResult } from './sse-client.ts'

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5)
const SLOTS = 4
/** Context per slot; llama-server gets SLOTS times this (its -c is the total it splits between slots). */
const SLOT_CONTEXT = 2048
/** `BENCH_FLASH_ATTENTION=auto|on|off` gives all three engines the same flash-attention setting (unset: their default, auto). */
const FLASH_ATTENTION = (process.env.BENCH_FLASH_ATTENTION ?? 'auto') as FlashAttention
if (!FLASH_ATTENTION_CHOICES.includes(FLASH_ATTENTION)) throw new Error(`BENCH_FLASH_ATTENTION must be one of ${FLASH_ATTENTION_CHOICES.join(', ')}, not ${FLASH_ATTENTION}`)
/** `BENCH_LLAMA_SERVER=native|release|prebuilt`: which build of llama-server (bench/llama-server-build.ts). */
const LLAMA_SERVER_BUILD = (process.env.BENCH_LLAMA_SERVER ?? 'native') as LlamaServerBuild
if (!LLAMA_SERVER_BUILDS.includes(LLAMA_SERVER_BUILD)) throw new Error(`BENCH_LLAMA_SERVER must be one of ${LLAMA_SERVER_BUILDS.join(', ')}, not ${LLAMA_SERVER_BUILD}`)
const DECODE_TOKENS = Number(process.env.BENCH_MAX_TOKENS ?? 128)
/**
 * `BENCH_ONLY=decode` measures the one-stream decode alone (each engine's, and the raw engine's): rounds of a second or
 * two instead of a minute, so that many of them fit in a run; the other measures print as NaN.
 */
const DECODE_ONLY = process.env.BENCH_ONLY === 'decode'
if (process.env.BENCH_ONLY != null && !DECODE_ONLY) throw new Error(`BENCH_ONLY must be decode, not ${process.env.BENCH_ONLY}`)
const TURNS = 6
const TURN_WORDS = 150 // about 200 tokens with the Llama-2 vocabulary
const TURN_ANSWER_TOKENS = 48
const TURN_ANSWER_WORDS = 36 // about 48 tokens
const LONG_PROMPT_WORDS = 1100 // about 1,500 tokens
const TARGETS = ['llama-server', 'meshnode', 'direct'] as const
type TargetName = typeof TARGETS[number]
type Message = { role: 'system' | 'user' | 'assistant', content: string }

interface Target {
  name: TargetName
  pid: number
  /** Runs `streams` identical generations at once; results in stream order. `conversation`: a chat's next turn. */
  generate: (messages: Message[], maxTokens: number, streams: number, conversation?: boolean) => Promise<ChatStreamResult[]>
  /** The raw engine's text completion of `prompt` (the direct target only). */
  complete?: (prompt: string, maxTokens: number) => Promise<DirectResult>
  close: () => void
}

interface RoundResult {
  decode1: number
  /** The raw engine's decode (`LlamaCompletion`, the direct target only; NaN for the others). */
  raw1: number
  decode4: number
  /** CPU time the engine's process spent per generated token (all its threads, user and system), 1 and 4 streams. */
  cpu1: number
  cpu4: number
  longTtftMs: number
  chatTtftMs: number[]
  chatCached: Array<number | null>
  /**
   * The last turn's whole answer (its TURN_ANSWER_TOKENS tokens), from the request's start to its last token (not the
   * response's end, which may wait for a server's own bookkeeping): what a user waits for, where TTFT is only the
   * prompt's share. Flash attention's choice moves the two in opposite directions (bench/HISTORY.md, Session 11).
   */
  lastTurnMs: number
  lastTurnTokens: number
}

/** A difference in MB with its sign: +12 MB, -54 MB (NaN where /proc did not say). */
const mb = (value: number): string => Number.isNaN(value) ? 'unknown' : `${value >= 0 ? '+' : '-'}${Math.abs(value)} MB`

function memory (pid: number): { rssMB: number, peakMB: number } {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8')
  const kb = (key: string): number => Number(new RegExp(`^${key}:\\s+(\\d+) kB`, 'm').exec(status)?.[1] ?? NaN)
  return { rssMB: Math.round(kb('VmRSS') / 1024), peakMB: Math.round(kb('VmHWM') / 1024) }
}

/**
 * CPU time a process has used so far, in ms (all threads, user and system; /proc's clock ticks, 10 ms here). Unlike
 * wall time, what an engine spends per token does not depend on how much of the machine others take: on a shared,
 * oversubscribed machine it is the figure that compares engines.
 */
function cpuMs (pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8')
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
  return (Number(fields[11]) + Number(fields[12])) * 10
}

function httpTarget (name: TargetName, url: string, pid: number, child: ChildProcess, model = 'bench'): Target {
  return {
    name,
    pid,
    generate: async (messages, maxTokens, streams) => {
      const body = { model, messages, max_tokens: maxTokens, temperature: 0, stream: true, stream_options: { include_usage: true } }
      const started = performance.now()
      return await Promise.all(Array.from({ length: streams }, async () =>
        await streamChat(`${url}/v1/chat/completions`, body, { started, collectText: streams === 1 })))
    },
    close: () => { child.kill('SIGTERM') }
  }
}

async function startLlamaServerTarget (binary: string, model: string): Promise<Target> {
  const { url, child } = await startLlamaServer(binary, model, ['-t', '1', '-tb', '1', '-c', String(SLOTS * SLOT_CONTEXT), '-np', String(SLOTS), '-fa', FLASH_ATTENTION])
  return httpTarget('llama-server', url, child.pid ?? 0, child)
}

async function startMeshnodeTarget (model: string, dataDir: string): Promise<Target> {
  // The node as users run it, the model loaded at start.
  const { url, child } = await startMeshnode(dataDir,
    ['--threads', '1', '--slots', String(SLOTS), '--context-size', String(SLOT_CONTEXT), '--flash-attention', FLASH_ATTENTION, '--model', model])
  const deadline = Date.now() + 120_000
  let modelID: string | undefined
  while (modelID == null) {
    if (Date.now() > deadline) throw new Error('meshnode did not load the model')
    const listed = await fetch(`${url}/v1/models`).then(async (res) => await res.json() as { data: Array<{ id: string }> }, () => ({ data: [] }))
    modelID = listed.data[0]?.id
    if (modelID == null) await new Promise((resolve) => setTimeout(resolve, 200))
  }
  return httpTarget('meshnode', url, child.pid ?? 0, child, modelID)
}

async function startDirect (model: string): Promise<Target> {
  const child = spawn(process.execPath, [join(import.meta.dirname, 'direct-engine.ts'), model, String(SLOTS), String(SLOT_CONTEXT), FLASH_ATTENTION],
    // With the environment the launcher gives `serve` (its libuv pool size above all), so that the two differ only in
    // what meshnode adds to node-llama-cpp
    { stdio: ['ignore', 'inherit', 'inherit', 'ipc'], env: { ...process.env, ...serveEnvironment(process.env) } })
  track(child, 'direct')
  await new Promise<void>((resolve, reject) => {
    child.once('exit', (code) => { reject(new Error(`direct engine exited with ${code}`)) })
    child.once('message', () => { resolve() })
  })
  const run = async (job: DirectJob): Promise<DirectResult[]> => {
    child.send(job)
    const answer = await new Promise<{ results?: DirectResult[], error?: string }>((resolve) => child.once('message', resolve))
    if (answer.results == null) throw new Error(`direct engine: ${answer.error}`)
    return answer.results
  }
  return {
    name: 'direct',
    pid: child.pid ?? 0,
    generate: async (messages, maxTokens, streams, conversation = false) => {
      // A chat keeps its sequence, so LlamaChat evaluates only the new turn. Other runs clear first: node-llama-cpp's
      // batch loop holds the context lock while any decode is queued, so concurrent generations that must first trim
      // a kept sequence would wait for each other and run one after another.
      const results = await run({ op: 'generate', messages, maxTokens, streams, keepHistory: conversation })
      return results.map((r) => ({ ...r, cachedTokens: null, promptTokens: null, servedBy: null }))
    },
    complete: async (prompt, maxTokens) => (await run({ op: 'complete', prompt, maxTokens }))[0],
    close: () => { child.kill('SIGTERM') }
  }
}

/** One round of every measurement on one target. `seed` makes the long prompt and the chat unlike any before. */
async function round (target: Target, seed: number): Promise<RoundResult> {
  const prompt: Message[] = [{ role: 'user', content: 'Once upon a time, in a small village by the sea, there lived a fisherman who' }]
  let cpu = cpuMs(target.pid)
  const [one] = await target.generate(prompt, DECODE_TOKENS, 1)
  const cpu1 = (cpuMs(target.pid) - cpu) / one.tokens
  const decode1 = (one.tokens - 1) / ((one.lastMs - one.ttftMs) / 1000)
  const raw = await target.complete?.(prompt[0].content, DECODE_TOKENS)
  const raw1 = raw == null ? Number.NaN : (raw.tokens - 1) / ((raw.lastMs - raw.ttftMs) / 1000)
  if (DECODE_ONLY) {
    return { decode1, raw1, decode4: NaN, cpu1, cpu4: NaN, longTtftMs: NaN, chatTtftMs: Array(TURNS).fill(NaN), chatCached: [], lastTurnMs: NaN, lastTurnTokens: 0 }
  }
  cpu = cpuMs(target.pid)
  const four = await target.generate(prompt, DECODE_TOKENS, 4)
  const fourTokens = four.reduce((sum, r) => sum + r.tokens, 0)
  const cpu4 = (cpuMs(target.pid) - cpu) / fourTokens
  const decode4 = fourTokens / (Math.max(...four.map((r) => r.endMs)) / 1000)
  const [long] = await target.generate([{ role: 'user', content: `${seed} ${text(LONG_PROMPT_WORDS, seed)}` }], 1, 1)
  const history: Message[] = [{ role: 'system', content: `Conversation ${seed}. You are a helpful assistant.` }]
  const answers: ChatStreamResult[] = []
  for (let turn = 0; turn < TURNS; turn++) {
    history.push({ role: 'user', content: text(TURN_WORDS, seed * 100 + turn) })
    const [answer] = await target.generate(history, TURN_ANSWER_TOKENS, 1, true)
    answers.push(answer)
    // The history carries a fixed answer of about the same length, the same for every server: a random model's text
    // re-tokenizes differently from the tokens it sampled, by a different amount on each server (meshnode's answer
    // and llama-server's differ), which would make one server evaluate more than the other for reasons of luck.
    history.push({ role: 'assistant', content: text(TURN_ANSWER_WORDS, seed * 100 + turn + 50) })
  }
  const last = answers[TURNS - 1]
  return {
    decode1, raw1, decode4, cpu1, cpu4, longTtftMs: long.ttftMs,
    chatTtftMs: answers.map((a) => a.ttftMs), chatCached: answers.map((a) => a.cachedTokens), lastTurnMs: last.lastMs, lastTurnTokens: last.tokens
  }
}

async function benchModel (name: string, model: string, llamaServer: string): Promise<string[]> {
  // Started one after another so each load has the machine to itself; all stay up, and only one works at a time.
  const dataDir = await mkdtemp(join(tmpdir(), 'meshnode-bench-node-'))
  const targets = [await startLlamaServerTarget(llamaServer, model), await startMeshnodeTarget(model, dataDir), await startDirect(model)]
  const loaded = Object.fromEntries(targets.map((t) => [t.name, memory(t.pid).rssMB])) as Record<TargetName, number>
  const results = new Map<TargetName, RoundResult[]>(TARGETS.map((t) => [t, []]))
  let peak: Record<TargetName, number>
  try {
    for (const target of targets) await round(target, 1) // warm-up: first allocations, JIT, page cache
    for (let r = 0; r < ROUNDS; r++) {
      // Rotate the order every round, so drift in the machine's load falls on every target alike.
      for (let i = 0; i < targets.length; i++) {
        const target = targets[(r + i) % targets.length]
        const result = await round(target, 1000 + r)
        results.get(target.name)?.push(result)
        console.error(`${name} round ${r + 1}/${ROUNDS} ${target.name}: decode1 ${result.decode1.toFixed(1)}${Number.isNaN(result.raw1) ? '' : ` (raw completion ${result.raw1.toFixed(1)})`} decode4 ${result.decode4.toFixed(1)} ` +
          `cpu/token ${result.cpu1.toFixed(2)}/${result.cpu4.toFixed(2)} ms, ` +
          `long ${result.longTtftMs.toFixed(0)} ms, chat ${result.chatTtftMs.map((t) => t.toFixed(0)).join('/')} ms, cached ${result.chatCached.join('/')}, ` +
          `last turn ${result.lastTurnMs.toFixed(0)} ms for ${result.lastTurnTokens} tokens`)
      }
    }
    peak = Object.fromEntries(targets.map((t) => [t.name, memory(t.pid).peakMB])) as Record<TargetName, number>
  } finally {
    for (const target of targets) target.close()
  }
  await new Promise((resolve) => setTimeout(resolve, 1000)) // let the node close its database before its folder goes
  await rm(dataDir, { recursive: true, force: true })
  const m = (target: TargetName, pick: (r: RoundResult) => number): number => median((results.get(target) ?? []).map(pick))
  const rows: string[] = []
  const measures: Array<[string, (r: RoundResult) => number, number]> = [
    ['1 stream, decode tok/s', (r) => r.decode1, 1],
    ['1 stream, decode tok/s (direct: the raw engine, LlamaCompletion)', (r) => Number.isNaN(r.raw1) ? r.decode1 : r.raw1, 1],
    ['4 streams, aggregate tok/s', (r) => r.decode4, 1],
    ['1 stream, process CPU ms/token', (r) => r.cpu1, 2],
    ['4 streams, process CPU ms/token', (r) => r.cpu4, 2],
    [`long prompt (~1,500 tokens) TTFT ms`, (r) => r.longTtftMs, 0],
    ['6-turn chat, turn 2 TTFT ms', (r) => r.chatTtftMs[1], 0],
    ['6-turn chat, turn 6 TTFT ms', (r) => r.chatTtftMs[TURNS - 1], 0],
    [`6-turn chat, turn 6 whole answer (${TURN_ANSWER_TOKENS} tokens) ms`, (r) => r.lastTurnMs, 0]
  ]
  for (const [label, pick, digits] of measures) {
    const [server, mesh, direct] = TARGETS.map((t) => m(t, pick))
    rows.push(`| ${name} | ${label} | ${server.toFixed(digits)} | ${direct.toFixed(digits)} | ${mesh.toFixed(digits)} | ${(mesh / server).toFixed(3)} | ${(mesh / direct).toFixed(3)} |`)
  }
  rows.push(`| ${name} | RSS after load MB | ${loaded['llama-server']} | ${loaded.direct} | ${loaded.meshnode} | ${mb(loaded.meshnode - loaded['llama-server'])} | |`)
  rows.push(`| ${name} | peak RSS MB | ${peak['llama-server']} | ${peak.direct} | ${peak.meshnode} | ${mb(peak.meshnode - peak['llama-server'])} | |`)
  const cached = (target: TargetName): string => (results.get(target)?.[0]?.chatCached ?? []).map((c) => c ?? '-').join('/')
  console.error(`${name}: cached tokens per turn, llama-server ${cached('llama-server')}, meshnode ${cached('meshnode')}`)

  const ratio = (target: TargetName, pick: (r: RoundResult) => number): number => m('meshnode', pick) / m(target, pick)
  const turn6 = ratio('llama-server', (r) => r.chatTtftMs[TURNS - 1])
  const agg = ratio('llama-server', (r) => r.decode4)
  const vsDirect = ratio('direct', (r) => r.decode1)
  const vsRaw = m('meshnode', (r) => r.decode1) / m('direct', (r) => r.raw1)
  const vsServer = ratio('llama-server', (r) => r.decode1)
  const lastTurn = ratio('llama-server', (r) => r.lastTurnMs)
  const atLeast = (value: number, limit: number): string => check(value, limit, true)
  const atMost = (value: number, limit: number): string => check(value, limit, false)
  const peakMore = peak.meshnode - peak['llama-server']
  console.log(`\n${name}: turn-6 TTFT ${atMost(turn6, 1.1)} llama-server (its whole answer ${lastTurn.toFixed(3)}x); 4-stream ${atLeast(agg, 0.95)}; ` +
    `1-stream ${atLeast(vsRaw, 0.95)} the raw engine (LlamaCompletion), ${atLeast(vsDirect, 0.95)} direct LlamaChat, ${atLeast(vsServer, 0.9)} llama-server; ` +
    `peak RSS ${mb(peakMore)} (<= 100: ${peakMore <= 100 ? 'met' : 'NOT met'}); ` +
    `RSS after load ${mb(loaded.meshnode - loaded['llama-server'])} (node-llama-cpp direct ${mb(loaded.direct - loaded['llama-server'])})`)
  return rows
}

const llamaServer = await ensureLlamaServer(LLAMA_SERVER_BUILD)
const loadAtStart = loadavg()
const shared = join(import.meta.dirname, '..', '..', 'shared', 'models')
const small = join(shared, 'random-llama-24M-q8_0.gguf')
const models: Array<[string, string]> = [
  ['random 24M', small],
  ['random 135M shape', await ensureRandom135M(join(BENCH_CACHE, 'random-llama-135M-shape-q8_0.gguf'), small)]
]
const only = process.env.BENCH_MODELS
const rows: string[] = []
for (const [name, path] of models) {
  if (only != null && !only.split(',').some((m) => name.includes(m))) continue
  rows.push(...await benchModel(name, path, llamaServer))
}
console.log(`\n${ROUNDS} interleaved rounds (medians), llama-server's ${LLAMA_SERVER_BUILD} build, flash attention ${FLASH_ATTENTION}, ` +
  `1 thread, ${SLOTS} slots of ${SLOT_CONTEXT} tokens, greedy, ` +
  `${DECODE_TOKENS} tokens decoded, chat turns of ~${TURN_WORDS} words + ${TURN_ANSWER_TOKENS}-token answers; ` +
  `load average (1/5/15 min) ${loadAtStart.map((l) => l.toFixed(1)).join('/')} at the start, ${loadavg().map((l) => l.toFixed(1)).join('/')} at the end\n`)
console.log('| model | measure | llama-server | node-llama-cpp direct | meshnode HTTP | meshnode / llama-server | meshnode / direct |')
console.log('|---|---|---:|---:|---:|---:|---:|')
for (const row of rows) console.log(row)
process.exit(0) // the direct engine's IPC channel would otherwise hold the process open
