// bench:agent — a coding agent's session as Claude Code or Codex drives a node: a ~20k-token prefix (a system prompt
// and tool definitions) resent with every request, then turns that each add a user message and an answer. Time to
// first token of every turn on random-weight GGUFs of the 24M and 135M shapes written with a 32k trained context:
// - meshnode (`meshnode serve` as a process, one slot of 32k): turn 1 cold, turns 2..5 from the slot's cache, asked in
//   turn with llama-server's, each also timed to the end of its answer (the first token and the 15 after it);
// - after a swap: another model asked for (--max-loaded-models 1 evicts the agent's), then the next turn;
// - after a restart: the node stopped (SIGTERM) and started again on the same data dir, then the next turn;
// - through a peer: a node without the model asking two peers that serve it; affinity should keep every turn on the
//   peer that served the first (X-Served-By), so turns 2..5 are cached there;
// - llama-server (built from the llama.cpp node-llama-cpp ships) with `cache_prompt`, its default, one slot of 32k.
// Every server answers the same prompts: each turn appends a fixed answer of about the model's length, not the random
// model's own text, which would re-tokenize differently on each server. Method and results: bench/README.md.
import { mkdtemp, rm } from 'node:fs/promises'
import { loadavg, tmpdir } from 'node:os'
import { join } from 'node:path'
import { getLlama } from 'node-llama-cpp'
import { defaultConfig, type NodeConfig } from '../src/config.ts'
import { startNode, type RunningNode } from '../src/node.ts'
import { BENCH_CACHE, ensureLlamaServer } from './llama-server-build.ts'
import { check, median, startLlamaServer, startMeshnode, startRelay, stop, text, type ServerProcess } from './processes.ts'
import { ensureRandomLlama, SHAPES, type ShapeName } from './random-gguf.ts'
import { streamChat, type ChatStreamResult } from './sse-client.ts'

const PREFIX_TOKENS = Number(process.env.BENCH_PREFIX_TOKENS ?? 20_000)
const THREADS = Number(process.env.BENCH_THREADS ?? 1)
const CONTEXT = 32_768
const TURNS = 5
const TURN_WORDS = 60 // about 80 tokens: an agent's tool result or instruction
const ANSWER_TOKENS = 16
const ANSWER_WORDS = 12 // about 16 tokens
const TOOLS = 40
const MODELS = (process.env.BENCH_MODELS ?? '24M,135M').split(',') as ShapeName[]
for (const shape of MODELS) if (!(shape in SHAPES)) throw new Error(`BENCH_MODELS: ${shape} is not one of ${Object.keys(SHAPES).join(', ')}`)
/** `BENCH_PEER=0` leaves out the run through a peer (a third cold prompt: 12 minutes on the 135M shape here). */
const THROUGH_PEER = process.env.BENCH_PEER !== '0'
const MODEL_ID = 'agent'
const SHARED_MODELS = join(import.meta.dirname, '..', '..', 'shared', 'models')
const TOKENIZER_FROM = join(SHARED_MODELS, 'random-llama-24M-q8_0.gguf')
/** The model asked for in between, to make the node swap the agent's model out. */
const OTHER_MODEL = join(SHARED_MODELS, 'stories260K-chatml.gguf')

type Message = { role: 'system' | 'user' | 'assistant', content: string }
/** A turn's figures, and the start of its answer (which shows whether a first token was held back). */
interface Turn { ttftMs: number, endMs: number, answerTokens: number, promptTokens: number | null, cachedTokens: number | null, servedBy: string | null, answer: string }

/** Tool definitions as an agent sends them, in the system prompt so that every server renders them alike. */
function toolDefinitions (): string {
  const tools = Array.from({ length: TOOLS }, (_, i) => ({
    name: `tool_${i}`,
    description: text(40, 10_000 + i),
    parameters: {
      type: 'object',
      properties: Object.fromEntries(Array.from({ length: 4 }, (_, p) => [`arg_${p}`, { type: p % 2 === 0 ? 'string' : 'integer', description: text(8, 20_000 + i * 10 + p) }])),
      required: ['arg_0']
    }
  }))
  return JSON.stringify(tools, null, 1)
}

/** A system prompt of PREFIX_TOKENS tokens (by the model's tokenizer): instructions, then the tool definitions. */
async function systemPrompt (modelPath: string): Promise<{ prompt: string, tokens: number }> {
  const llama = await getLlama({ gpu: false })
  const model = await llama.loadModel({ modelPath, vocabOnly: true })
  try {
    const tools = `\n\n# Tools\n${toolDefinitions()}`
    const count = (prompt: string): number => model.tokenize(prompt).length
    let words = Math.max(0, Math.round((PREFIX_TOKENS - count(tools)) / 1.3))
    let prompt = `You are a coding agent. ${text(words, 1)}${tools}`
    // Two corrections bring it within a few tokens of the target.
    for (let i = 0; i < 2; i++) {
      words = Math.max(0, words + Math.round((PREFIX_TOKENS - count(prompt)) / 1.3))
      prompt = `You are a coding agent. ${text(words, 1)}${tools}`
    }
    return { prompt, tokens: count(prompt) }
  } finally {
    await model.dispose()
  }
}

/** The conversation up to turn `turn` (0-based): the prefix, and each earlier turn with its fixed answer. */
function conversation (system: string, turn: number): Message[] {
  const messages: Message[] = [{ role: 'system', content: system }]
  for (let i = 0; i <= turn; i++) {
    messages.push({ role: 'user', content: text(TURN_WORDS, 100 + i) })
    if (i < turn) messages.push({ role: 'assistant', content: text(ANSWER_WORDS, 200 + i) })
  }
  return messages
}

async function ask (url: string, model: string, messages: Message[]): Promise<Turn> {
  const body = { model, messages, max_tokens: ANSWER_TOKENS, temperature: 0, stream: true, stream_options: { include_usage: true } }
  const result: ChatStreamResult = await streamChat(`${url}/v1/chat/completions`, body, { collectText: true })
  return { ttftMs: result.ttftMs, endMs: result.endMs, answerTokens: result.tokens, promptTokens: result.promptTokens, cachedTokens: result.cachedTokens, servedBy: result.servedBy, answer: result.text }
}

async function post (url: string, path: string, body: unknown): Promise<void> {
  const res = await fetch(`${url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) })
  if (!res.ok) throw new Error(`${path}: HTTP ${res.status} ${await res.text()}`)
  await res.arrayBuffer()
}

function log (label: string, turn: Turn): void {
  console.error(`  ${label}: TTFT ${turn.ttftMs.toFixed(0)} ms, whole answer ${turn.endMs.toFixed(0)} ms (${turn.answerTokens} tokens), prompt ${turn.promptTokens ?? '-'} tokens, cached ${turn.cachedTokens ?? '-'}${turn.servedBy == null ? '' : `, served by ${turn.servedBy}`}, answer ${JSON.stringify(turn.answer.slice(0, 16))}…`)
}

/**
 * Turns 1..TURNS on llama-server and on `meshnode serve`, both up at once and asked in turn (each cold turn 1 one after
 * the other, then each later turn of one and of the other, the order alternating), so that drift in the machine's
 * speed over the minutes a run takes falls on both alike; then, on meshnode, one turn after a swap and one after a
 * restart.
 */
async function sideBySide (binary: string, modelPath: string, system: string, root: string): Promise<{ server: Turn[], mesh: Turn[], afterSwap: Turn, afterRestart: Turn }> {
  const dataDir = join(root, 'node')
  const args = ['--threads', String(THREADS), '--slots', '1', '--context-size', String(CONTEXT), '--max-loaded-models', '1']
  const server = await startLlamaServer(binary, modelPath, ['-t', String(THREADS), '-tb', String(THREADS), '-c', String(CONTEXT), '-np', '1'])
  let node: ServerProcess | null = null
  try {
    node = await startMeshnode(dataDir, args)
    await post(node.url, '/v1/app/models/import', { path: modelPath, modelID: MODEL_ID })
    await post(node.url, '/v1/app/models/import', { path: OTHER_MODEL, modelID: 'other' })
    // Each answers a warm-up first (meshnode loads the model for it): turn 1 measures the prompt
    const targets = [{ name: 'llama-server', url: server.url, turns: [] as Turn[] }, { name: 'meshnode', url: node.url, turns: [] as Turn[] }]
    for (const target of targets) await ask(target.url, MODEL_ID, [{ role: 'user', content: 'warm up' }])
    for (let turn = 0; turn < TURNS; turn++) {
      for (let i = 0; i < targets.length; i++) {
        const target = targets[(turn + i) % targets.length]
        target.turns.push(await ask(target.url, MODEL_ID, conversation(system, turn)))
        log(`${target.name} turn ${turn + 1}`, target.turns[turn])
      }
    }
    await stop(server.child)
    await ask(node.url, 'other', [{ role: 'user', content: 'Once upon a time' }])
    const afterSwap = await ask(node.url, MODEL_ID, conversation(system, TURNS))
    log('meshnode after a swap', afterSwap)
    await stop(node.child)
    node = await startMeshnode(dataDir, args)
    const afterRestart = await ask(node.url, MODEL_ID, conversation(system, TURNS + 1))
    log('meshnode after a restart', afterRestart)
    return { server: targets[0].turns, mesh: targets[1].turns, afterSwap, afterRestart }
  } finally {
    await stop(server.child)
    if (node != null) await stop(node.child)
  }
}

/** Turns 1..TURNS asked of a node without the model, which two peers serve. */
async function throughPeer (modelPath: string, system: string, root: string): Promise<Turn[]> {
  const relay = await startRelay(join(root, 'relay'))
  const network: NodeConfig['network'] = { pingIntervalMs: 1_000, wan: { syncIntervalMs: 1_000, fastSyncMs: 200 } }
  const config = (dir: string): NodeConfig => defaultConfig({ port: 0, dataDir: join(root, dir), logLevel: 'warn', threads: THREADS, slots: 1, contextSize: CONTEXT, network })
  const nodes: RunningNode[] = []
  try {
    const servers = [await startNode(config('peer-a')), await startNode(config('peer-b'))]
    nodes.push(...servers)
    const asker = await startNode(config('asker'))
    nodes.push(asker)
    for (const server of servers) await server.engine.load(MODEL_ID, modelPath)
    for (const node of nodes) {
      const res = await fetch(`${node.url}/v1/app/settings`, { method: 'PATCH', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ wan_enabled: true, wan_relay_url: relay.url }) })
      if (!res.ok) throw new Error(`settings: ${res.status} ${await res.text()}`)
    }
    const deadline = Date.now() + 60_000
    while (!servers.every((server) => asker.network.peer(server.identity.nodeID)?.record.models.loaded === MODEL_ID)) {
      if (Date.now() > deadline) throw new Error('the asking node did not find both peers')
      await new Promise((resolve) => setTimeout(resolve, 50))
    }
    for (const server of servers) await ask(server.url, MODEL_ID, [{ role: 'user', content: 'warm up' }])
    const turns: Turn[] = []
    for (let turn = 0; turn < TURNS; turn++) {
      turns.push(await ask(asker.url, MODEL_ID, conversation(system, turn)))
      log(`through a peer, turn ${turn + 1}`, turns[turn])
    }
    return turns
  } finally {
    for (const node of nodes.reverse()) await node.close()
    relay.child.removeAllListeners('exit')
    await stop(relay.child)
  }
}

const binary = await ensureLlamaServer('native')
const loadAtStart = loadavg()
const rows: string[] = []
const verdicts: string[] = []
for (const shape of MODELS) {
  const modelPath = await ensureRandomLlama(join(BENCH_CACHE, `random-llama-${shape}-shape-32k-q8_0.gguf`), TOKENIZER_FROM, shape, CONTEXT)
  const { prompt: system, tokens } = await systemPrompt(modelPath)
  console.error(`${shape}: a system prompt of ${tokens} tokens`)
  const root = await mkdtemp(join(tmpdir(), 'meshnode-bench-agent-'))
  try {
    const { server, mesh, afterSwap, afterRestart } = await sideBySide(binary, modelPath, system, root)
    const peer = THROUGH_PEER ? await throughPeer(modelPath, system, root) : null
    /** The median of turns 2..5: of the first token (`ttftMs`), or of the whole answer (`endMs`). */
    const later = (turns: Turn[], until: 'ttftMs' | 'endMs' = 'ttftMs'): number => median(turns.slice(1).map((t) => t[until]))
    const cold = mesh[0].ttftMs
    const ms = (value: number): string => value.toFixed(0)
    const cached = (turn: Turn): string => String(turn.cachedTokens ?? '-')
    const samePeer = peer != null && peer.slice(1).every((t) => t.servedBy === peer[0].servedBy)
    rows.push(`| ${shape} | ${mesh[0].promptTokens ?? tokens} | ${ms(cold)} | ${ms(later(mesh))} | ` +
      `${ms(afterSwap.ttftMs)} (${cached(afterSwap)} cached) | ${ms(afterRestart.ttftMs)} (${cached(afterRestart)} cached) | ` +
      `${peer == null ? 'not run' : `${ms(peer[0].ttftMs)} / ${ms(later(peer))} (${samePeer ? 'same peer' : 'peers differ'}, ${peer.slice(1).map(cached).join('/')} cached)`} | ` +
      `${ms(server[0].ttftMs)} / ${ms(later(server))} | ${ms(later(mesh, 'endMs'))} / ${ms(later(server, 'endMs'))} |`)
    verdicts.push(`${shape}: after a swap ${check(afterSwap.ttftMs / cold, 0.1, false)} cold; after a restart ${check(afterRestart.ttftMs / cold, 0.1, false)} cold; ` +
      `turns 2..5 ${check(later(mesh) / later(server), 1, false)} llama-server's (the whole answer ${(later(mesh, 'endMs') / later(server, 'endMs')).toFixed(3)}x)` +
      (peer == null ? '' : `; through a peer, turns 2..5 ${samePeer ? 'stayed on the first peer' : 'did NOT stay on one peer'}`))
  } finally {
    await rm(root, { recursive: true, force: true })
  }
}
console.log(`\nbench:agent — a ${PREFIX_TOKENS}-token prefix (${TOOLS} tools and instructions), ${TURNS} turns of ~${TURN_WORDS} words with ${ANSWER_TOKENS}-token answers, ` +
  `${THREADS} thread(s), one slot of ${CONTEXT} tokens, greedy; TTFT in ms (medians of turns 2..5), and the time to the whole answer; ` +
  `load average (1/5/15 min) ${loadAtStart.map((l) => l.toFixed(1)).join('/')} at the start, ${loadavg().map((l) => l.toFixed(1)).join('/')} at the end\n`)
console.log('| model | prompt tokens | cold TTFT | turns 2..5 | after a swap | after a restart | through a peer: turn 1 / 2..5 | llama-server: turn 1 / 2..5 | whole answer, turns 2..5: meshnode / llama-server |')
console.log('|---|---:|---:|---:|---:|---:|---:|---:|---:|')
for (const row of rows) console.log(row)
console.log('')
for (const verdict of verdicts) console.log(verdict)
process.exit(0)
