// Starts real nodes for tests: the production composition root on port 0 with a temp data dir, closed in t.after.
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { spawn, type ChildProcess } from 'node:child_process'
import type { TestContext } from 'node:test'
import { defaultConfig, type NodeConfig } from '../../src/config.ts'
import type { NodeID } from '../../src/identity/index.ts'
import { startNode, type RunningNode } from '../../src/node.ts'

export interface ApiResponse<T = any> { // eslint-disable-line @typescript-eslint/no-explicit-any
  status: number
  headers: Headers
  body: T
}

/** A minimal JSON HTTP client bound to one node. `raw` sends a body string as is, for malformed-input tests. */
export class Api {
  readonly url: string
  #headers: Record<string, string>
  constructor (url: string, headers: Record<string, string> = {}) {
    this.url = url
    this.#headers = headers
  }

  withHeaders (headers: Record<string, string>): Api {
    return new Api(this.url, { ...this.#headers, ...headers })
  }

  async get (path: string, headers: Record<string, string> = {}): Promise<ApiResponse> {
    return await this.send('GET', path, undefined, headers)
  }

  async post (path: string, body?: unknown, headers: Record<string, string> = {}): Promise<ApiResponse> {
    return await this.send('POST', path, body === undefined ? undefined : JSON.stringify(body), { 'content-type': 'application/json', ...headers })
  }

  async patch (path: string, body: unknown, headers: Record<string, string> = {}): Promise<ApiResponse> {
    return await this.send('PATCH', path, JSON.stringify(body), { 'content-type': 'application/json', ...headers })
  }

  async send (method: string, path: string, body: string | undefined, headers: Record<string, string> = {}): Promise<ApiResponse> {
    const request = { method, body, headers: { ...this.#headers, ...headers } }
    let response: Response
    try {
      response = await fetch(this.url + path, request)
    } catch (err) {
      // A kept-alive connection the node closed (its idle timeout) just as this request went out on it: like a
      // browser, retry an idempotent request once on a fresh connection (RFC 9112 §9.3.1). A node that is gone fails again.
      if ((method !== 'GET' && method !== 'HEAD') || ((err as Error).cause as NodeJS.ErrnoException | undefined)?.code !== 'ECONNRESET') throw err
      response = await fetch(this.url + path, request)
    }
    const text = await response.text()
    let parsed: unknown = text
    if ((response.headers.get('content-type') ?? '').includes('json')) parsed = JSON.parse(text)
    return { status: response.status, headers: response.headers, body: parsed }
  }
}

export interface TestNode {
  node: RunningNode
  api: Api
  dataDir: string
  config: NodeConfig
  nodeID: NodeID
  /** Closes the node and starts it again on the same data dir. */
  restart (): Promise<TestNode>
}

export async function tempDir (t: TestContext, prefix = 'meshnode-test-'): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), prefix))
  t.after(() => rm(dir, { recursive: true, force: true }))
  return dir
}

/** `logDestination` receives the node's JSON log lines (set `logLevel` in `overrides` to see any). */
export async function startTestNode (t: TestContext, overrides: Partial<NodeConfig> = {}, options: { logDestination?: NodeJS.WritableStream } = {}): Promise<TestNode> {
  const dataDir = overrides.dataDir ?? await tempDir(t)
  const config = defaultConfig({ port: 0, dataDir, logLevel: process.env.MESHNODE_TEST_LOG ?? 'silent', threads: 1, ...overrides })
  return await launch(t, config, options)
}

async function launch (t: TestContext, config: NodeConfig, options: { logDestination?: NodeJS.WritableStream } = {}): Promise<TestNode> {
  const node = await startNode(config, options)
  t.after(() => node.close())
  const result: TestNode = {
    node,
    api: new Api(node.url),
    dataDir: config.dataDir,
    config,
    nodeID: node.identity.nodeID,
    restart: async () => {
      await node.close()
      // A fresh port: fetch's pooled keep-alive sockets to the old one are dead, and a test should not trip on that.
      return await launch(t, config, options)
    }
  }
  return result
}

/** Polls `check` until it returns a value other than undefined/false, or fails after `timeoutMs`. */
export async function waitFor<T> (check: () => Promise<T | undefined | false> | T | undefined | false, options: { timeoutMs?: number, intervalMs?: number, what?: string } = {}): Promise<T> {
  const deadline = Date.now() + (options.timeoutMs ?? 60_000)
  let lastError: unknown = null
  while (Date.now() < deadline) {
    try {
      const value = await check()
      if (value !== undefined && value !== false) return value
    } catch (err) {
      lastError = err
    }
    await new Promise((resolve) => setTimeout(resolve, options.intervalMs ?? 50))
  }
  throw new Error(`Timed out waiting for ${options.what ?? 'condition'}${lastError == null ? '' : `: ${String(lastError)}`}`)
}

export const CLI = join(import.meta.dirname, '..', '..', 'src', 'cli', 'main.ts')

export interface NodeProcess {
  child: ChildProcess
  url: string
  port: number
  /** The PID of the node itself (from its log), which is the child's own unless a launcher runs it as a child. */
  pid: number
  output: () => string
}

/**
 * Runs `meshnode serve` as a separate process (for kill -9 and signal tests) and waits until it listens. `command`
 * is what runs it: by default this Node on src/cli/main.ts; a test of the launcher passes another Node and
 * bin/meshnode.js, or npm.
 */
export async function spawnNodeProcess (t: TestContext, args: string[], env: Record<string, string> = {}, command: string[] = [process.execPath, CLI, 'serve']): Promise<NodeProcess> {
  const child = spawn(command[0], [...command.slice(1), '--port', '0', ...args], {
    env: { ...process.env, MESHNODE_LOG_LEVEL: 'info', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
    cwd: join(import.meta.dirname, '..', '..')
  })
  t.after(() => { if (child.exitCode == null && child.signalCode == null) child.kill('SIGKILL') })
  let out = ''
  child.stdout.on('data', (chunk: Buffer) => { out += chunk.toString() })
  child.stderr.on('data', (chunk: Buffer) => { out += chunk.toString() })
  const listening = await waitFor(() => {
    if (child.exitCode != null) throw new Error(`node exited with ${child.exitCode}: ${out}`)
    const line = out.split('\n').find((l) => l.includes('meshnode is listening'))
    return line == null ? undefined : JSON.parse(line) as { port: number, pid: number }
  }, { timeoutMs: 60_000, what: 'the node process to listen' })
  return { child, port: listening.port, pid: listening.pid, url: `http://127.0.0.1:${listening.port}`, output: () => out }
}

export async function exitOf (child: ChildProcess): Promise<{ code: number | null, signal: NodeJS.Signals | null }> {
  if (child.exitCode != null || child.signalCode != null) return { code: child.exitCode, signal: child.signalCode }
  return await new Promise((resolve) => child.once('exit', (code, signal) => { resolve({ code, signal }) }))
}
