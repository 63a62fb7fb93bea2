// The PID a user (or systemd, Docker, pm2) starts is the one they signal. bin/meshnode.js under the
// system Node and `npm start` must stop the node itself, gracefully, and free its port.
import { test } from 'node:test'
import type { TestContext } from 'node:test'
import assert from 'node:assert/strict'
import { spawnSync } from 'node:child_process'
import { accessSync, constants, readFileSync } from 'node:fs'
import { createServer } from 'node:net'
import { availableParallelism } from 'node:os'
import { delimiter, join } from 'node:path'
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
