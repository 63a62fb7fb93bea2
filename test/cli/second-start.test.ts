// A second `meshnode serve` that cannot run (its data dir is held by a running node, or its port is taken) exits at
// once, having touched nothing: the running node's admin token stays valid, so its owner keeps control of it.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { readFile, readdir, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { ADMIN_TOKEN_FILE } from '../../src/config.ts'
import { DATA_DIR_LOCK_FILE } from '../../src/store/index.ts'
import { Api, CLI, exitOf, spawnNodeProcess, tempDir } from '../support/node.ts'

/** Runs `meshnode serve` with `args` to its end (a start that fails). */
async function failedStart (args: string[]): Promise<{ code: number | null, output: string }> {
  const child = spawn(process.execPath, [CLI, 'serve', ...args], { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, MESHNODE_LOG_LEVEL: 'info' } })
  let output = ''
  child.stdout.on('data', (chunk: Buffer) => { output += chunk.toString() })
  child.stderr.on('data', (chunk: Buffer) => { output += chunk.toString() })
  const { code } = await exitOf(child)
  return { code, output }
}

test('a second start on a running node\'s data dir, or on its port, exits without touching the admin token, the data or the network', async (t) => {
  const dataDir = await tempDir(t)
  const first = await spawnNodeProcess(t, ['--data-dir', dataDir])
  const token = (await readFile(join(dataDir, ADMIN_TOKEN_FILE), 'utf8')).trim()
  const owner = new Api(first.url, { authorization: `Bearer ${token}` })
  // With network access on, every call needs the key: the admin token is the owner's
  assert.equal((await owner.patch('/v1/app/settings', { allow_network_access: true })).status, 200)
  assert.equal((await readFile(join(dataDir, DATA_DIR_LOCK_FILE), 'utf8')).trim(), String(first.pid))

  const sameDir = await failedStart(['--data-dir', dataDir, '--port', '0'])
  assert.equal(sameDir.code, 1, sameDir.output)
  assert.match(sameDir.output, new RegExp(`data dir .* is in use by a running node \\(PID ${first.pid}\\)`))
  assert.doesNotMatch(sameDir.output, /meshnode is listening|network/i)
  assert.equal((await readFile(join(dataDir, ADMIN_TOKEN_FILE), 'utf8')).trim(), token, 'the admin token was not replaced')

  const otherDir = await tempDir(t)
  const samePort = await failedStart(['--data-dir', otherDir, '--port', String(first.port)])
  assert.equal(samePort.code, 1, samePort.output)
  assert.match(samePort.output, new RegExp(`port ${first.port} on 127\\.0\\.0\\.1 is already in use`))
  assert.deepEqual(await readdir(otherDir), [], 'nothing was written to its data dir')

  // The owner still administers the running node with the token it has
  const res = await owner.patch('/v1/app/settings', { allow_network_access: false })
  assert.equal(res.status, 200, JSON.stringify(res.body))
})

test('a lock left by a node that is gone (kill -9) is taken over at the next start', async (t) => {
  const dataDir = await tempDir(t)
  const crashed = await spawnNodeProcess(t, ['--data-dir', dataDir])
  crashed.child.kill('SIGKILL')
  await exitOf(crashed.child)
  assert.equal((await readFile(join(dataDir, DATA_DIR_LOCK_FILE), 'utf8')).trim(), String(crashed.pid), 'the lock stayed behind')
  const next = await spawnNodeProcess(t, ['--data-dir', dataDir])
  assert.equal((await readFile(join(dataDir, DATA_DIR_LOCK_FILE), 'utf8')).trim(), String(next.pid))
  // An unreadable lock is stale too
  next.child.kill('SIGKILL')
  await exitOf(next.child)
  await writeFile(join(dataDir, DATA_DIR_LOCK_FILE), 'not a pid\n')
  const third = await spawnNodeProcess(t, ['--data-dir', dataDir])
  assert.equal((await readFile(join(dataDir, DATA_DIR_LOCK_FILE), 'utf8')).trim(), String(third.pid))
  third.child.kill('SIGTERM')
  await exitOf(third.child)
  assert.deepEqual((await readdir(dataDir)).filter((name) => name === DATA_DIR_LOCK_FILE), [], 'a clean stop releases it')
})
