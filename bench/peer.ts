// bench:peer — tokens/s and time to first token of the same chat stream served locally and served by a peer through
// the WAN relay (a `meshnode relay` process), same model, same run. Method: bench/README.md.
import { existsSync } from 'node:fs'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Worker } from 'node:worker_threads'
import { defaultConfig, type NodeConfig } from '../src/config.ts'
import { startNode, type RunningNode } from '../src/node.ts'
import { writeTinyGguf } from '../test/support/tiny-gguf.ts'
import { median, startRelay, stop } from './processes.ts'

const MAX_TOKENS = Number(process.env.BENCH_MAX_TOKENS ?? 128)
const RUNS = Number(process.env.BENCH_RUNS ?? 5)
const THREADS = 1
const PROMPT = 'Once upon a time, in a small village by the sea, there lived a fisherman who'
const MODEL_ID = 'bench'
/** BENCH_DIRECT=1: the nodes listen on loopback and connect directly, to tell the relay's cost from the protocol's. */
const DIRECT = process.env.BENCH_DIRECT === '1'

interface Sample { ttftMs: number, tokens: number, seconds: number }
interface Summary { tokensPerSecond: number, ttftMs: number }

/** Streams from `url` RUNS times (after one warm-up) through the worker client; tokens/s and TTFT medians. */
async function measure (worker: Worker, url: string): Promise<Summary> {
  const results: Summary[] = []
  for (let run = -1; run < RUNS; run++) {
    const body = {
      model: MODEL_ID, messages: [{ role: 'user', content: PROMPT }], max_tokens: MAX_TOKENS, temperature: 0,
      stream: true, stream_options: { include_usage: true }
    }
    worker.postMessage({ url: `${url}/v1/chat/completions`, body, streams: 1 })
    const { samples } = await new Promise<{ samples: Sample[], wallSeconds: number }>((resolve, reject) => {
      worker.once('error', reject)
      worker.once('message', (message: { samples: Sample[], wallSeconds: number }) => {
        worker.off('error', reject)
        resolve(message)
      })
    })
    const [sample] = samples
    if (sample.tokens !== MAX_TOKENS) throw new Error(`expected ${MAX_TOKENS} tokens, got ${sample.tokens}`)
    if (run >= 0) results.push({ tokensPerSecond: sample.tokens / sample.seconds, ttftMs: sample.ttftMs })
  }
  return { tokensPerSecond: median(results.map(r => r.tokensPerSecond)), ttftMs: median(results.map(r => r.ttftMs)) }
}

async function benchModel (name: string, path: string, root: string): Promise<void> {
  const relay = await startRelay(join(root, `${name}-relay`))
  const nodes: RunningNode[] = []
  const network: NodeConfig['network'] = { pingIntervalMs: 1_000, wan: { syncIntervalMs: 1_000, fastSyncMs: 200 } }
  try {
    // No direct listen addresses: the requester reaches the server only through the relay.
    const config = (dir: string): NodeConfig => defaultConfig({ port: 0, dataDir: join(root, `${name}-${dir}`), logLevel: 'warn', threads: THREADS, slots: 1, contextSize: 2048, p2pListen: DIRECT ? null : [], network })
    const server = await startNode(config('server'))
    nodes.push(server)
    const requester = await startNode(config('requester'))
    nodes.push(requester)
    await server.engine.load(MODEL_ID, path)
    for (const node of [server, requester]) {
      const res = await fetch(`${node.url}/v1/app/settings`, { method: 'PATCH', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ wan_enabled: true, wan_relay_url: relay.url }) })
      if (!res.ok) throw new Error(`settings: ${res.status} ${await res.text()}`)
    }
    const deadline = Date.now() + 30_000
    while (requester.network.peer(server.identity.nodeID)?.record.models.loaded !== MODEL_ID) {
      if (Date.now() > deadline) throw new Error('the requester did not find the server through the relay')
      await new Promise(resolve => setTimeout(resolve, 50))
    }
    const relayed = requester.network.host.getConnections().filter(c => c.remotePeer.equals(server.network.host.peerId)).every(c => c.remoteAddr.toString().includes('/p2p-circuit'))
    if (!relayed && !DIRECT) throw new Error('the requester is connected to the server directly; the bench wants the relay path')

    const worker = new Worker(join(import.meta.dirname, 'sse-client.ts'))
    try {
      // Interleaved, so that both paths see the same machine load.
      const local: Summary[] = []
      const peer: Summary[] = []
      for (let round = 0; round < 2; round++) {
        local.push(await measure(worker, server.url))
        peer.push(await measure(worker, requester.url))
      }
      const l = { tokensPerSecond: median(local.map(s => s.tokensPerSecond)), ttftMs: median(local.map(s => s.ttftMs)) }
      const p = { tokensPerSecond: median(peer.map(s => s.tokensPerSecond)), ttftMs: median(peer.map(s => s.ttftMs)) }
      console.log(`| ${name} | ${l.tokensPerSecond.toFixed(0)} | ${p.tokensPerSecond.toFixed(0)} | ${(p.tokensPerSecond / l.tokensPerSecond).toFixed(2)} | ${l.ttftMs.toFixed(1)} | ${p.ttftMs.toFixed(1)} |`)
    } finally {
      await worker.terminate()
    }
  } finally {
    for (const node of nodes.reverse()) await node.close()
    relay.child.removeAllListeners('exit')
    await stop(relay.child)
  }
}

const root = await mkdtemp(join(tmpdir(), 'meshnode-bench-peer-'))
try {
  const shared = join(import.meta.dirname, '..', '..', 'shared', 'models')
  const models: Array<[string, string]> = []
  for (const file of ['random-llama-24M-q8_0.gguf', 'stories260K.gguf']) {
    if (existsSync(join(shared, file))) models.push([file.replace(/\.gguf$/, ''), join(shared, file)])
  }
  if (models.length === 0) models.push(['tiny (generated)', (await writeTinyGguf(join(root, 'tiny.gguf'), { seed: 7, contextLength: 2048 })).path])
  console.log(`bench:peer — ${MAX_TOKENS} tokens, greedy, 1 stream, ${THREADS} thread, median of ${RUNS} runs × 2 interleaved rounds`)
  console.log(`| model | local tok/s | via peer (${DIRECT ? 'direct' : 'relay'}) tok/s | peer/local | local TTFT ms | peer TTFT ms |`)
  console.log('|---|---:|---:|---:|---:|---:|')
  for (const [name, path] of models) await benchModel(name, path, root)
} finally {
  await rm(root, { recursive: true, force: true })
}
