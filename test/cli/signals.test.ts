// The PID a user (or systemd, Docker, pm2) starts is the one they signal. bin/meshnode.js under the
// system Node and `npm start` must stop the node itself, gracefully, and free its port. Ctrl-C in a terminal
// signals the whole foreground process group, npm and the node alike: that too is one graceful stop.
import { test } from 'node:test'
import type { TestContext } from 'node:test'
import assert from 'node:assert/strict'
import { spawn, spawnSync } from 'node:child_process'
import { accessSync, constants, readFileSync } from 'node:fs'
import { connect, createServer } from 'node:net'
import { availableParallelism } from 'node:os'
import { delimiter, join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { FORCE_AFTER_MS } from '../../src/cli/commands/serve.ts'
import { exitOf, spawnNodeProcess, tempDir, waitFor, type NodeProcess } from '../support/node.ts'
import { exists } from '../support/files.ts'

const BIN = join(import.meta.dirname, '..', '..', 'bin', 'meshnode.js')

/** The first `name` on PATH outside any node_modules: what `/usr/bin/env name` finds outside `npm run`. */
function systemExecutable (name: string): string | null {
  for (const dir of (process.env.PATH ?? '').split(delimiter)) {
    if (dir === '' || dir.includes('node_modules')) continue
    try {
      accessSync(join(dir, name), constants.X_OK)
      return join(dir, name)
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT' && (err as NodeJS.ErrnoException).code !== 'EACCES') throw err
    }
  }
  return null
}

const systemNode = systemExecutable('node') ?? process.execPath
const systemNodeVersion = spawnSync(systemNode, ['--version'], { encoding: 'utf8' }).stdout.trim()

async function portIsFree (port: number): Promise<boolean> {
  const server = createServer()
  return await new Promise((resolve) => {
    server.once('error', () => { resolve(false) })
    server.listen(port, '127.0.0.1', () => { server.close(() => { resolve(true) }) })
  })
}

function isRunning (pid: number): boolean {
  try {
    process.kill(pid, 0)
    return true
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ESRCH') return false // the answer we look for
    throw err
  }
}

/** The node stopped the graceful way: its log says so, its database was closed (SQLite removes the WAL), its port is free. */
async function assertStoppedGracefully (proc: NodeProcess, dataDir: string, how: string): Promise<void> {
  await waitFor(() => !isRunning(proc.pid), { what: `the node (PID ${proc.pid}) to end after ${how}` })
  assert.match(proc.output(), /shutting down/, `${how}: the graceful stop ran`)
  assert.equal(await exists(join(dataDir, 'meshnode.db-wal')), false, `${how}: the database was closed`)
  assert.ok(await waitFor(async () => await portIsFree(proc.port), { what: `port ${proc.port} to be free` }))
}

/** The environment process `pid` runs with, where /proc shows it (Linux); null elsewhere. */
function environmentOf (pid: number): Map<string, string> | null {
  if (process.platform !== 'linux') return null
  const entries = readFileSync(`/proc/${pid}/environ`, 'latin1').split('\0').filter((entry) => entry !== '')
  return new Map(entries.map((entry) => [entry.slice(0, entry.indexOf('=')), entry.slice(entry.indexOf('=') + 1)]))
}

/**
 * `serve` runs with two malloc arenas (glibc) and one libuv pool thread per core (2 to 4), both set by the launcher
 * before the node starts, unless the user set them.
 */
function assertServeEnvironment (pid: number, how: string, userPool?: string): void {
  const environment = environmentOf(pid)
  if (environment == null) return
  // What the runner's own environment sets is the user's choice, and kept
  const given = (name: string): string | undefined => process.env[name] === '' ? undefined : process.env[name]
  assert.equal(environment.get('MALLOC_ARENA_MAX'), given('MALLOC_ARENA_MAX') ?? '2', `${how}: the node runs with two malloc arenas`)
  const pool = userPool ?? given('UV_THREADPOOL_SIZE') ?? String(Math.min(4, Math.max(2, availableParallelism())))
  assert.equal(environment.get('UV_THREADPOOL_SIZE'), pool, `${how}: the node runs with a pool of ${pool} threads`)
}

async function launch (t: TestContext, command: string[], env: Record<string, string> = {}): Promise<{ proc: NodeProcess, dataDir: string }> {
  const dataDir = await tempDir(t)
  const proc = await spawnNodeProcess(t, ['--data-dir', dataDir], env, command)
  t.after(() => { if (isRunning(proc.pid)) process.kill(proc.pid, 'SIGKILL') })
  return { proc, dataDir }
}

test(`SIGTERM or SIGHUP to bin/meshnode.js run by the system Node (${systemNodeVersion}) stops the node and frees its port`, async (t) => {
  t.diagnostic(`system node: ${systemNode} ${systemNodeVersion}`)
  for (const signal of ['SIGTERM', 'SIGHUP'] as const) {
    // The second time with a pool size of the user's own, which the launcher keeps
    const userPool = signal === 'SIGHUP' ? '3' : undefined
    const { proc, dataDir } = await launch(t, [systemNode, BIN, 'serve'], userPool == null ? {} : { UV_THREADPOOL_SIZE: userPool })
    assertServeEnvironment(proc.pid, `bin/meshnode.js under ${systemNodeVersion}`, userPool)
    proc.child.kill(signal) // the PID the user started, not the node's if they differ
    assert.deepEqual(await exitOf(proc.child), { code: 0, signal: null }, `${signal}: the launcher exits with the node's code`)
    await assertStoppedGracefully(proc, dataDir, signal)
  }
})

test(`package.json's engines admit the system Node (${systemNodeVersion}) the launcher runs on, so npm warns of nothing`, () => {
  const { engines } = JSON.parse(readFileSync(join(import.meta.dirname, '..', '..', 'package.json'), 'utf8')) as { engines: { node: string } }
  const floor = /^>=(\d+)$/.exec(engines.node)
  assert.ok(floor != null, `engines.node is a plain floor: ${engines.node}`)
  // The launcher runs the node on the pinned Node 24 under any Node from 18 on (bin/meshnode.js)
  assert.equal(Number(floor[1]), 18)
  assert.ok(Number(systemNodeVersion.slice(1).split('.')[0]) >= Number(floor[1]))
})

test('npx meshnode prints what the command prints and nothing else (no engine warning)', { skip: systemExecutable('npx') == null ? 'no npx on PATH' : false }, () => {
  const npx = systemExecutable('npx') as string
  const result = spawnSync(npx, ['meshnode', '--version'], { encoding: 'utf8', cwd: join(import.meta.dirname, '..', '..'), env: { ...process.env, npm_config_update_notifier: 'false' } })
  assert.equal(result.status, 0, result.stderr)
  assert.equal(result.stdout.trim(), JSON.parse(readFileSync(join(import.meta.dirname, '..', '..', 'package.json'), 'utf8')).version)
  assert.equal(result.stderr, '', 'npm warned')
})

test('the node stops by itself when its launcher is killed outright', async (t) => {
  const { proc, dataDir } = await launch(t, [systemNode, BIN, 'serve'])
  proc.child.kill('SIGKILL')
  await exitOf(proc.child)
  if (proc.pid === proc.child.pid) {
    // The launcher became the node (process.execve, Node 22.15+): SIGKILL ended the node itself; the port is free
    assert.ok(await waitFor(async () => await portIsFree(proc.port), { what: `port ${proc.port} to be free` }))
    return
  }
  await assertStoppedGracefully(proc, dataDir, 'its launcher was killed')
})

test('SIGTERM to the PID of `npm start` stops the node and frees its port', { skip: systemExecutable('npm') == null ? 'no npm on PATH' : false }, async (t) => {
  const { proc, dataDir } = await launch(t, [systemExecutable('npm') ?? 'npm', 'start', '--silent', '--'])
  assert.notEqual(proc.pid, proc.child.pid, 'npm runs the node as its child')
  assertServeEnvironment(proc.pid, 'npm start')
  proc.child.kill('SIGTERM')
  assert.deepEqual(await exitOf(proc.child), { code: 0, signal: null }, 'npm exits with the node\'s code')
  await assertStoppedGracefully(proc, dataDir, 'SIGTERM to npm')
})

/**
 * `npm start` in a process group of its own, as a terminal runs a foreground job, so that a test can signal the
 * group as Ctrl-C does. Waits until the node listens.
 */
async function launchGroup (t: TestContext): Promise<{ proc: NodeProcess, dataDir: string }> {
  const dataDir = await tempDir(t)
  const child = spawn(systemExecutable('npm') ?? 'npm', ['start', '--silent', '--', '--port', '0', '--data-dir', dataDir], {
    env: { ...process.env, MESHNODE_LOG_LEVEL: 'info' },
    stdio: ['ignore', 'pipe', 'pipe'],
    cwd: join(import.meta.dirname, '..', '..'),
    detached: true
  })
  t.after(() => {
    try {
      process.kill(-(child.pid ?? 0), 'SIGKILL')
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ESRCH') throw err // the group has ended: nothing to clean up
    }
  })
  let out = ''
  child.stdout.on('data', (chunk: Buffer) => { out += chunk.toString() })
  child.stderr.on('data', (chunk: Buffer) => { out += chunk.toString() })
  const listening = await waitFor(() => {
    if (child.exitCode != null) throw new Error(`npm start exited with ${child.exitCode}: ${out}`)
    const line = out.split('\n').find((l) => l.includes('meshnode is listening'))
    return line == null ? undefined : JSON.parse(line) as { port: number, pid: number }
  }, { timeoutMs: 60_000, what: 'the node under npm start to listen' })
  const proc = { child, port: listening.port, pid: listening.pid, url: `http://127.0.0.1:${listening.port}`, output: () => out }
  return { proc, dataDir }
}

/** Ctrl-C as a terminal sends it: SIGINT to every process of the foreground group. */
function ctrlC (proc: NodeProcess): void {
  process.kill(-(proc.child.pid ?? 0), 'SIGINT')
}

test('Ctrl-C on `npm start` (SIGINT to its whole process group) stops the node gracefully', { skip: systemExecutable('npm') == null ? 'no npm on PATH' : false }, async (t) => {
  const { proc, dataDir } = await launchGroup(t)
  assert.notEqual(proc.pid, proc.child.pid, 'npm runs the node as its child, in its group')
  ctrlC(proc) // the node gets it from the "terminal" and again from npm, which forwards it
  // npm exits with the node's code, or by SIGINT when npm's forwarded copy reached the node as it was ending, its
  // graceful stop done (as the checks below prove): by then Node has let go of its signal handlers
  const exit = await exitOf(proc.child)
  assert.ok((exit.code === 0 && exit.signal == null) || (exit.code == null && exit.signal === 'SIGINT'), `npm's exit ${JSON.stringify(exit)}: ${proc.output()}`)
  await assertStoppedGracefully(proc, dataDir, 'Ctrl-C')
  assert.doesNotMatch(proc.output(), /forced exit/)
})

test('a second Ctrl-C on `npm start`, while the first stop waits for a request, forces the exit', { skip: systemExecutable('npm') == null ? 'no npm on PATH' : false }, async (t) => {
  const { proc } = await launchGroup(t)
  // A request whose body never ends holds the graceful stop until its grace period cuts it (10 s). The node's
  // "100 Continue" says it has the request, so the stop cannot begin before it is in flight.
  const held = connect(proc.port, '127.0.0.1')
  held.on('error', () => { /* the node ends with the socket open: a reset here is the point of the test */ })
  t.after(() => { held.destroy() })
  let answer = ''
  held.on('data', (chunk: Buffer) => { answer += chunk.toString() })
  held.write(`POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:${proc.port}\r\nContent-Type: application/json\r\n` +
    'Content-Length: 1000\r\nExpect: 100-continue\r\n\r\n')
  await waitFor(() => answer.startsWith('HTTP/1.1 100 Continue'), { what: `the node to take the request: ${answer}` })
  held.write('{')
  ctrlC(proc)
  await waitFor(() => /shutting down/.test(proc.output()), { what: 'the graceful stop to begin' })
  // The node counts a second signal within FORCE_AFTER_MS of the first as the same Ctrl-C: a person's second one
  // comes later, which this wait stands for
  await sleep(FORCE_AFTER_MS)
  assert.ok(isRunning(proc.pid), 'the node still waits for the held request')
  ctrlC(proc)
  await exitOf(proc.child)
  await waitFor(() => !isRunning(proc.pid), { what: `the node (PID ${proc.pid}) to end after the second Ctrl-C` })
  assert.match(proc.output(), /meshnode: forced exit/)
})
