// bench:http — requests/s of GET /health and GET /v1/app against a bare node:http server in the same run, and the
// node's idle RSS. Method in bench/README.md. Servers run as child processes; the load generator runs here.
import { spawn, type ChildProcess } from 'node:child_process'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { rssMB, runLoad } from './load.ts'

const SECONDS = Number(process.env.BENCH_SECONDS ?? 5)
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 16)
const root = join(import.meta.dirname, '..')

async function startChild (args: string[], portOf: (line: string) => number | null): Promise<{ child: ChildProcess, port: number }> {
  const child = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'inherit'], env: { ...process.env, MESHNODE_LOG_LEVEL: process.env.MESHNODE_LOG_LEVEL ?? 'info' } })
  let buffer = ''
  const port = await new Promise<number>((resolve, reject) => {
    child.stdout?.on('data', (chunk: Buffer) => {
      buffer += chunk.toString()
      for (const line of buffer.split('\n')) {
        if (!line.trim().startsWith('{') || !line.trim().endsWith('}')) continue
        const found = portOf(line)
        if (found != null) resolve(found)
      }
    })
    child.once('exit', (code) => { reject(new Error(`child exited with ${code}`)) })
  })
  child.stdout?.removeAllListeners('data')
  child.stdout?.resume()
  return { child, port }
}

async function stop (child: ChildProcess): Promise<void> {
  const exited = new Promise((resolve) => child.once('exit', resolve))
  child.kill('SIGTERM')
  await exited
}

const dataDir = await mkdtemp(join(tmpdir(), 'meshnode-bench-'))
try {
  // The node runs as a user runs it, logging a line per request at info to a pipe we drain.
  const node = await startChild([join(root, 'src/cli/main.ts'), 'serve', '--port', '0', '--data-dir', dataDir], (line) => {
    const parsed = JSON.parse(line) as { msg?: string, port?: number }
    return parsed.msg === 'meshnode is listening' ? parsed.port ?? null : null
  })
  await new Promise((resolve) => setTimeout(resolve, 1000)) // let start-up garbage settle before reading idle RSS
  const idleRss = rssMB(node.child.pid ?? 0)
  const bare = await startChild([join(import.meta.dirname, 'bare-server.ts')], (line) => (JSON.parse(line) as { port: number }).port)

  await runLoad(`http://127.0.0.1:${bare.port}/`, { connections: CONNECTIONS, seconds: 1 }) // warm-up
  await runLoad(`http://127.0.0.1:${node.port}/health`, { connections: CONNECTIONS, seconds: 1 })
  const bareResult = await runLoad(`http://127.0.0.1:${bare.port}/`, { connections: CONNECTIONS, seconds: SECONDS })
  const health = await runLoad(`http://127.0.0.1:${node.port}/health`, { connections: CONNECTIONS, seconds: SECONDS })
  const app = await runLoad(`http://127.0.0.1:${node.port}/v1/app`, { connections: CONNECTIONS, seconds: SECONDS })
  const loadedRss = rssMB(node.child.pid ?? 0)
  await stop(bare.child)
  await stop(node.child)

  const results = {
    date: new Date().toISOString(),
    node: process.version,
    connections: CONNECTIONS,
    seconds: SECONDS,
    bareNodeHttp: bareResult,
    health,
    app,
    healthVsBare: Math.round(health.requestsPerSecond / bareResult.requestsPerSecond * 100) / 100,
    idleRssMB: idleRss,
    rssAfterLoadMB: loadedRss
  }
  console.log(JSON.stringify(results, null, 2))
  console.log(`\nGET /health ${health.requestsPerSecond} req/s = ${Math.round(results.healthVsBare * 100)} % of bare node:http (${bareResult.requestsPerSecond} req/s); ` +
    `GET /v1/app ${app.requestsPerSecond} req/s; idle RSS ${idleRss ?? '?'} MB, after load ${loadedRss ?? '?'} MB`)
} finally {
  await rm(dataDir, { recursive: true, force: true })
}
