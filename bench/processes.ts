// What the benches that run servers as child processes share: free ports, the servers' start-up, deterministic text,
// medians, and how a result is printed against its target. Every child started here is killed when the bench exits.
import { spawn, type ChildProcess } from 'node:child_process'
import { createServer } from 'node:net'
import { dirname, join } from 'node:path'

const children = new Set<ChildProcess>()
process.on('exit', () => { for (const child of children) child.kill('SIGKILL') })
for (const signal of ['SIGINT', 'SIGTERM'] as const) process.on(signal, () => { process.exit(130) }) // 'exit' ends the servers

/** Kills `child` when the bench exits, and says so when it ends other than by SIGTERM. */
export function track (child: ChildProcess, name: string): void {
  children.add(child)
  child.once('exit', (code, signal) => {
    children.delete(child)
    if (code !== 0 && signal !== 'SIGTERM') console.error(`${name} exited (${code ?? signal})`)
  })
}

export async function freePort (): Promise<number> {
  const server = createServer()
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const address = server.address()
  await new Promise<void>((resolve) => server.close(() => { resolve() }))
  if (address == null || typeof address === 'string') throw new Error('no port')
  return address.port
}

export function median (values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b)
  const mid = Math.floor(sorted.length / 2)
  return sorted.length % 2 === 1 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2
}

/** Deterministic filler text: `words` words from a small English list, different for every `seed`. */
export function text (words: number, seed: number): string {
  const list = ('the of and to in is you that it he was for on are as with his they at be this have from or one had by ' +
    'word but not what all were we when your can said there use an each which she do how their if will up other about ' +
    'out many then them these so some her would make like him into time has look two more write go see number no way ' +
    'could people my than first water been call who oil its now find long down day did get come made may part').split(' ')
  let state = seed * 2654435761 >>> 0
  const out: string[] = []
  for (let i = 0; i < words; i++) {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0
    out.push(list[state % list.length])
  }
  return out.join(' ')
}

export async function waitForHealth (url: string, child: ChildProcess): Promise<void> {
  const deadline = Date.now() + 120_000
  while (Date.now() < deadline) {
    if (child.exitCode != null) throw new Error(`${url}: the server exited (${child.exitCode})`)
    const ok = await fetch(`${url}/health`).then((res) => res.ok, () => false)
    if (ok) return
    await new Promise((resolve) => setTimeout(resolve, 200))
  }
  throw new Error(`${url} did not become healthy`)
}

export interface ServerProcess { url: string, child: ChildProcess }

/** llama-server on a free loopback port with `args` after its model, healthy. */
export async function startLlamaServer (binary: string, model: string, args: string[]): Promise<ServerProcess> {
  const port = await freePort()
  // Its own directory first on the library path: the `prebuilt` build's libraries are not where its RUNPATH points.
  const libraryPath = [dirname(binary), process.env.LD_LIBRARY_PATH].filter((path) => path != null && path !== '').join(':')
  const child = spawn(binary, ['-m', model, '--host', '127.0.0.1', '--port', String(port), '--no-webui', '--log-disable', ...args],
    { stdio: ['ignore', 'ignore', 'pipe'], env: { ...process.env, LD_LIBRARY_PATH: libraryPath } })
  track(child, 'llama-server')
  let log = ''
  child.stderr?.on('data', (chunk: Buffer) => { log = (log + chunk.toString()).slice(-4000) })
  const url = `http://127.0.0.1:${port}`
  try {
    await waitForHealth(url, child)
  } catch (err) {
    throw new Error(`${String(err)}\n${log}`)
  }
  return { url, child }
}

/** `meshnode serve` as users run it (bin/meshnode.js, which starts it with its V8 flags) on a free port, healthy. */
export async function startMeshnode (dataDir: string, args: string[]): Promise<ServerProcess> {
  const port = await freePort()
  const child = spawn(process.execPath, [join(import.meta.dirname, '..', 'bin', 'meshnode.js'), 'serve', '--port', String(port), '--data-dir', dataDir, ...args],
    { stdio: ['ignore', 'ignore', 'inherit'], env: { ...process.env, MESHNODE_LOG_LEVEL: 'warn' } })
  track(child, 'meshnode')
  const url = `http://127.0.0.1:${port}`
  await waitForHealth(url, child)
  return { url, child }
}

/** SIGTERM, then the process's exit. */
export async function stop (child: ChildProcess): Promise<void> {
  if (child.exitCode != null || child.signalCode != null) return
  const exited = new Promise((resolve) => child.once('exit', resolve))
  child.kill('SIGTERM')
  await exited
}

/**
 * A ratio against its target, printed rounded toward the side that misses, so that what is printed never looks met
 * when it is not (0.9496 shows as 0.949, not 0.950); the 1e-9 keeps a binary fraction from tipping a value on the line
 * past it (1.1 * 1000 is 1100.0000000000002).
 */
export function check (value: number, limit: number, atLeast: boolean): string {
  const shown = atLeast ? Math.floor(value * 1000 + 1e-9) : Math.ceil(value * 1000 - 1e-9)
  const met = atLeast ? value >= limit : value <= limit
  return `${(shown / 1000).toFixed(3)}x (${atLeast ? '>=' : '<='} ${limit}: ${met ? 'met' : 'NOT met'})`
}

/** `meshnode relay` as its own process, as it runs in production (its crypto and forwarding off the bench's loop). */
export async function startRelay (dataDir: string): Promise<{ url: string, child: ChildProcess }> {
  const child = spawn(process.execPath, [join(import.meta.dirname, '..', 'src', 'cli', 'main.ts'), 'relay', '--port', '0', '--data-dir', dataDir],
    { env: { ...process.env, MESHNODE_LOG_LEVEL: 'info' }, stdio: ['ignore', 'pipe', 'inherit'] })
  track(child, 'relay')
  let out = ''
  return await new Promise((resolve, reject) => {
    child.once('exit', (code) => { reject(new Error(`relay exited with ${code}: ${out}`)) })
    child.stdout?.on('data', (chunk: Buffer) => {
      out += chunk.toString()
      const line = out.split('\n').find(l => l.includes('relay listening'))
      if (line != null) resolve({ url: (JSON.parse(line) as { url: string }).url, child })
    })
  })
}
