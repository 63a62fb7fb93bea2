// Network namespaces for tests that need a network of their own (Linux, root, iproute2; iptables for NAT), and
// meshnode processes run inside them. They exist on this machine only, and each test deletes the ones it made.
import type { TestContext } from 'node:test'
import { execFile, spawn, spawnSync, type ChildProcess } from 'node:child_process'
import { promisify } from 'node:util'
import { CLI, tempDir, waitFor } from './node.ts'

const run = promisify(execFile)

/** Why namespaces cannot be made here, or null when they can; a test skips with this message. */
export function whyNetnsUnavailable (): string | null {
  if (process.platform !== 'linux') return 'network namespaces are Linux only'
  if (process.getuid?.() !== 0) return 'creating network namespaces needs root (run the tests as root to include this one)'
  const ip = spawnSync('ip', ['-V'])
  if (ip.error != null || ip.status !== 0) return 'the `ip` command (iproute2) is missing'
  const probe = `mnprobe${process.pid}`
  const add = spawnSync('ip', ['netns', 'add', probe])
  if (add.status !== 0) return `ip netns add failed: ${add.stderr.toString().trim()}`
  spawnSync('ip', ['netns', 'del', probe])
  return null
}

/** Why namespaces with NAT routers cannot be made here (iptables MASQUERADE too), or null when they can. */
export function whyNatUnavailable (): string | null {
  const netns = whyNetnsUnavailable()
  if (netns != null) return netns
  const probe = `mnnatprobe${process.pid}`
  spawnSync('ip', ['netns', 'add', probe])
  try {
    const nat = spawnSync('ip', ['netns', 'exec', probe, 'iptables', '-t', 'nat', '-A', 'POSTROUTING', '-o', 'lo', '-j', 'MASQUERADE'])
    if (nat.error != null) return 'the `iptables` command is missing (Debian: apt-get install iptables)'
    if (nat.status !== 0) return `iptables cannot masquerade here: ${nat.stderr.toString().trim()}`
    return null
  } finally {
    spawnSync('ip', ['netns', 'del', probe])
  }
}

export async function ip (...args: string[]): Promise<void> {
  await run('ip', args)
}

/** Runs a command inside `ns`. */
export async function inNetns (ns: string, ...command: string[]): Promise<string> {
  const { stdout } = await run('ip', ['netns', 'exec', ns, ...command])
  return stdout
}

/** A namespace made for this test, deleted when it ends. */
export async function addNetns (t: TestContext, ns: string): Promise<string> {
  await ip('netns', 'add', ns)
  t.after(() => ip('netns', 'del', ns))
  await ip('-n', ns, 'link', 'set', 'lo', 'up')
  return ns
}

/** A meshnode process (`serve` or `relay`) running inside a namespace. */
export interface NetnsProcess {
  ns: string
  dataDir: string
  child: ChildProcess
  output: () => string
}

/** A `meshnode serve` inside a namespace. */
export interface NetnsNode extends NetnsProcess {
  port: number
  nodeID: string
  /** Runs a meshnode client command inside the node's namespace, against it. */
  cli (...args: string[]): Promise<string>
  /** One HTTP request to the node's API from inside its namespace (a plain node script: faster than the CLI). */
  api (method: string, path: string, body?: unknown): Promise<any> // eslint-disable-line @typescript-eslint/no-explicit-any
  /** The same, answering the status, the headers and the body's text. */
  request (method: string, path: string, body?: unknown): Promise<{ status: number, headers: Record<string, string>, text: string }>
}

// Prints the status, the headers and the body; the node is reached on its loopback, inside the namespace.
const FETCH_SCRIPT = 'const [url, method, body] = process.argv.slice(1); ' +
  'fetch(url, { method, headers: { "content-type": "application/json" }, body: body === "" ? undefined : body })' +
  '.then(async (r) => { process.stdout.write(JSON.stringify({ status: r.status, headers: Object.fromEntries(r.headers), text: await r.text() })) })'

/** Starts `meshnode <args>` in `ns` and waits for the log line `ready` names; answers that line, parsed. */
export async function spawnInNetns<T> (t: TestContext, ns: string, args: string[], ready: string): Promise<NetnsProcess & { ready: T }> {
  const dataDir = await tempDir(t)
  const child = spawn('ip', ['netns', 'exec', ns, process.execPath, CLI, ...args, '--data-dir', dataDir], {
    env: { ...process.env, MESHNODE_LOG_LEVEL: process.env.MESHNODE_NETNS_LOG ?? 'info' },
    stdio: ['ignore', 'pipe', 'pipe']
  })
  t.after(() => { if (child.exitCode == null && child.signalCode == null) child.kill('SIGKILL') })
  let out = ''
  child.stdout?.on('data', (chunk: Buffer) => { out += chunk.toString() })
  child.stderr?.on('data', (chunk: Buffer) => { out += chunk.toString() })
  const line = await waitFor(() => {
    if (child.exitCode != null) throw new Error(`meshnode ${args[0]} in ${ns} exited with ${child.exitCode}: ${out}`)
    const found = out.split('\n').find(l => l.includes(ready))
    return found == null ? undefined : JSON.parse(found) as T
  }, { timeoutMs: 60_000, what: `meshnode ${args[0]} in ${ns} to log "${ready}"` })
  return { ns, dataDir, child, output: () => out, ready: line }
}

/** Starts `meshnode serve` in `ns` (extra `args` after serve's own) and waits until it listens. */
export async function startNetnsNode (t: TestContext, ns: string, args: string[] = []): Promise<NetnsNode> {
  const started = await spawnInNetns<{ port: number, nodeID: string }>(t, ns, ['serve', '--port', '0', ...args], 'meshnode is listening')
  const { port, nodeID } = started.ready
  const cli = async (...command: string[]): Promise<string> => {
    const { stdout } = await run('ip', ['netns', 'exec', ns, process.execPath, CLI, ...command, '--port', String(port), '--data-dir', started.dataDir],
      { env: { ...process.env, MESHNODE_API_KEY: '' } })
    return stdout
  }
  const request = async (method: string, path: string, body?: unknown): Promise<{ status: number, headers: Record<string, string>, text: string }> => {
    const stdout = await inNetns(ns, process.execPath, '-e', FETCH_SCRIPT, `http://127.0.0.1:${port}${path}`, method, body === undefined ? '' : JSON.stringify(body))
    return JSON.parse(stdout)
  }
  const api = async (method: string, path: string, body?: unknown): Promise<unknown> => {
    const answer = await request(method, path, body)
    if (answer.status >= 400) throw new Error(`${method} ${path} answered ${answer.status}: ${answer.text}`)
    return JSON.parse(answer.text)
  }
  return { ...started, port, nodeID, cli, api, request }
}
