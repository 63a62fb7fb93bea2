import { test } from 'node:test'
import assert from 'node:assert/strict'
import { readFile, writeFile, stat } from 'node:fs/promises'
import { join } from 'node:path'
import { Api, exitOf, spawnNodeProcess, startTestNode, tempDir, waitFor } from '../support/node.ts'
import { startNode } from '../../src/node.ts'
import { defaultConfig } from '../../src/config.ts'
import { CorruptStateError } from '../../src/errors.ts'

test('identity, settings and keys survive a restart; the data dir is 0700 and its secrets 0600', async (t) => {
  const first = await startTestNode(t)
  const key = (await first.api.post('/v1/app/apikeys', { name: 'keep' })).body
  await first.api.patch('/v1/app/settings', { max_storage_gb: 7, language: 'es' })
  const second = await first.restart()
  assert.equal(second.nodeID, first.nodeID)
  const settings = (await second.api.get('/v1/app')).body.settings
  assert.equal(settings.max_storage_gb, 7)
  assert.equal(settings.language, 'es')
  assert.deepEqual((await second.api.get('/v1/app/apikeys')).body.keys.map((k: { id: string }) => k.id), [key.id])
  assert.equal((await stat(join(first.dataDir, 'node.key'))).mode & 0o777, 0o600)
  assert.equal((await stat(join(first.dataDir, 'admin-token'))).mode & 0o777, 0o600)
  for (const file of ['meshnode.db', 'meshnode.db-wal']) assert.equal((await stat(join(first.dataDir, file))).mode & 0o777, 0o600, file)
  assert.equal((await stat(first.dataDir)).mode & 0o777, 0o700)
})

test('kill -9 during a burst of concurrent PATCH and key-generate calls loses nothing acknowledged', async (t) => {
  const dataDir = await tempDir(t)
  const proc = await spawnNodeProcess(t, ['--data-dir', dataDir])
  const api = new Api(proc.url)
  const acknowledgedKeys: string[] = []
  const sentStorage = new Set<number>()
  let lastAcknowledgedStorage: number | null = null
  let stop = false
  const worker = async (n: number): Promise<void> => {
    for (let i = 0; !stop; i++) {
      try {
        if (i % 2 === 0) {
          const res = await api.post('/v1/app/apikeys', { name: `w${n}-${i}` })
          if (res.status === 200) acknowledgedKeys.push(res.body.id)
        } else {
          const value = n * 1000 + i + 1
          sentStorage.add(value)
          const res = await api.patch('/v1/app/settings', { max_storage_gb: value })
          if (res.status === 200) lastAcknowledgedStorage = value
        }
      } catch (err) {
        // The node was killed under this request: expected once, and then the worker stops.
        if (!(err instanceof TypeError)) throw err
        return
      }
    }
  }
  const workers = Array.from({ length: 8 }, (_, n) => worker(n))
  // Let the burst run until a good number of writes were acknowledged, then pull the plug mid-burst.
  await waitFor(() => acknowledgedKeys.length >= 40, { timeoutMs: 20_000, intervalMs: 10, what: '40 acknowledged writes' })
  proc.child.kill('SIGKILL')
  await exitOf(proc.child)
  stop = true
  await Promise.all(workers)
  assert.ok(lastAcknowledgedStorage != null)

  const restarted = await startTestNode(t, { dataDir })
  const ids = new Set((await restarted.api.get('/v1/app/apikeys')).body.keys.map((k: { id: string }) => k.id))
  for (const id of acknowledgedKeys) assert.ok(ids.has(id), `acknowledged key ${id} survived`)
  const storage = (await restarted.api.get('/v1/app')).body.settings.max_storage_gb
  assert.ok(sentStorage.has(storage), 'the setting holds a value that was sent, never a torn one')
})

test('a corrupt database is reported and refused, never replaced', async (t) => {
  const first = await startTestNode(t)
  await first.api.post('/v1/app/apikeys', { name: 'precious' })
  await first.node.close()
  const path = join(first.dataDir, 'meshnode.db')
  const garbage = Buffer.concat([Buffer.from('this is not a database'), Buffer.alloc(8192, 7)])
  await writeFile(path, garbage)
  await assert.rejects(startNode(defaultConfig({ port: 0, dataDir: first.dataDir, logLevel: 'silent' })), (err: Error) => {
    assert.ok(err instanceof CorruptStateError)
    assert.match(err.message, /meshnode\.db is unreadable/)
    return true
  })
  assert.deepEqual(await readFile(path), garbage, 'the file was left as it was')
})

test('an unreadable node key is refused, never replaced by a new identity', async (t) => {
  const first = await startTestNode(t)
  await first.node.close()
  const keyPath = join(first.dataDir, 'node.key')
  await writeFile(keyPath, 'garbled')
  await assert.rejects(startNode(defaultConfig({ port: 0, dataDir: first.dataDir, logLevel: 'silent' })), CorruptStateError)
  assert.equal(await readFile(keyPath, 'utf8'), 'garbled')
})
