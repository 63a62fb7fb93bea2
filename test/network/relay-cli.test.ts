import { test, type TestContext } from 'node:test'
import assert from 'node:assert/strict'
import { execFile, spawn } from 'node:child_process'
import { promisify } from 'node:util'
import { CLI, exitOf, tempDir, waitFor } from '../support/node.ts'

const run = promisify(execFile)

async function startRelayProcess (t: TestContext, dataDir: string): Promise<{ peerId: string, url: string, stop: () => Promise<{ code: number | null }> }> {
  const child = spawn(process.execPath, [CLI, 'relay', '--port', '0', '--data-dir', dataDir], { env: { ...process.env, MESHNODE_LOG_LEVEL: 'info' }, stdio: ['ignore', 'pipe', 'pipe'] })
  t.after(() => { if (child.exitCode == null && child.signalCode == null) child.kill('SIGKILL') })
  let out = ''
  child.stdout.on('data', (chunk: Buffer) => { out += chunk.toString() })
  child.stderr.on('data', (chunk: Buffer) => { out += chunk.toString() })
  const ready = await waitFor(() => {
    if (child.exitCode != null) throw new Error(`relay exited with ${child.exitCode}: ${out}`)
    const line = out.split('\n').find(l => l.includes('relay listening'))
    return line == null ? undefined : JSON.parse(line) as { peerId: string, url: string }
  }, { timeoutMs: 30_000, what: 'the relay to listen' })
  return {
    ...ready,
    stop: async () => {
      child.kill('SIGTERM')
      return await exitOf(child)
    }
  }
}

test('meshnode relay: listens, keeps its peer id across restarts (key in its data dir), exits 0 on SIGTERM', async (t) => {
  const dataDir = await tempDir(t)
  const first = await startRelayProcess(t, dataDir)
  assert.match(first.url, /^ws:\/\/127\.0\.0\.1:\d+$/)
  assert.equal((await first.stop()).code, 0)
  const second = await startRelayProcess(t, dataDir)
  assert.equal(second.peerId, first.peerId)
  assert.equal((await second.stop()).code, 0)
})

test('meshnode relay refuses a bad port', async () => {
  await assert.rejects(run(process.execPath, [CLI, 'relay', '--port', '99999']), (err: { code: number, stderr: string }) => {
    assert.equal(err.code, 2)
    assert.match(err.stderr, /--port must be a whole number/)
    return true
  })
})

test('a second meshnode relay on a data dir in use refuses to start: one key, one relay', async (t) => {
  const dataDir = await tempDir(t)
  const first = await startRelayProcess(t, dataDir)
  await assert.rejects(run(process.execPath, [CLI, 'relay', '--port', '0', '--data-dir', dataDir]), (err: { code: number, stderr: string }) => {
    assert.equal(err.code, 1)
    assert.match(err.stderr, /in use by another running meshnode .*another --data-dir/)
    return true
  })
  assert.equal((await first.stop()).code, 0)
  // Its lock went with it: the data dir starts a relay again, with the same key.
  const again = await startRelayProcess(t, dataDir)
  assert.equal(again.peerId, first.peerId)
  assert.equal((await again.stop()).code, 0)
})
