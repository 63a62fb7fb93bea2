import { test } from 'node:test'
import assert from 'node:assert/strict'
import { execFile } from 'node:child_process'
import { promisify } from 'node:util'
import { CLI, tempDir } from '../support/node.ts'
import { startRelayProcess } from '../support/relay-process.ts'

const run = promisify(execFile)


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
