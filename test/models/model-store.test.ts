// The model store's parts split out of it: the free-disk check of the storage budget (statfs),
// "last used" kept in memory on the chat path and written in batches, and the migration imported files brought.
import { test } from 'node:test'
import type { TestContext } from 'node:test'
import assert from 'node:assert/strict'
import { join } from 'node:path'
import { startFakeHub, type FakeHub } from '../support/fake-hub.ts'
import { startTestNode, tempDir, waitFor, type TestNode } from '../support/node.ts'
import { writeTinyGguf, type TinyGguf } from '../support/tiny-gguf.ts'
import { exists } from '../support/files.ts'
import { DatabaseSync } from 'node:sqlite'
import { openDatabase } from '../../src/store/index.ts'
import { MIGRATIONS } from '../../src/store/migrations.ts'
import { ModelRecords } from '../../src/models/records.ts'
import { StorageBudget } from '../../src/models/storage-budget.ts'
import { EventEmitter } from 'node:events'
import { pino } from 'pino'
import type { ModelEventMap } from '../../src/models/events.ts'
import { InsufficientDiskError } from '../../src/models/errors.ts'

const REPO = 'meshnode-test/tiny-GGUF'
const MODEL = `hf.co/${REPO}/tiny.gguf`

async function hubWithTiny (t: TestContext): Promise<{ hub: FakeHub, gguf: TinyGguf }> {
  const dir = await tempDir(t, 'meshnode-hub-files-')
  const hub = await startFakeHub()
  t.after(() => hub.close())
  const gguf = await writeTinyGguf(join(dir, 'tiny.gguf'))
  await hub.addFile(REPO, 'tiny.gguf', gguf.path)
  return { hub, gguf }
}

function lastUsedInDatabase (node: TestNode, modelID: string): string | null {
  const row = node.node.db.prepare('SELECT last_used_at FROM models WHERE model_id = ?').get(modelID) as { last_used_at: string | null } | undefined
  assert.ok(row != null, `a row for ${modelID}`)
  return row.last_used_at
}

test('a download the disk cannot hold is refused with 507 naming the space, before any byte, and nothing changes', async (t) => {
  const { hub } = await hubWithTiny(t)
  // More headroom than any disk has: the real statfs figure can never cover it
  const node = await startTestNode(t, { hfEndpoint: hub.url, diskHeadroomBytes: 1e18 })
  const before = (await node.api.get('/v1/app/models')).body

  const res = await node.api.post('/v1/app/models/download', { modelID: MODEL })
  assert.equal(res.status, 507)
  assert.equal(res.body.error.type, 'insufficient_storage')
  assert.match(res.body.error.message, new RegExp(`^Not enough disk space: ${MODEL} needs 621\\.4 kB \\(\\d+ bytes\\) more, the disk of .*models has .* free`))
  assert.match(res.body.error.message, /Free some disk space/)
  assert.deepEqual((await node.api.get('/v1/app/models')).body, before)
  assert.equal(hub.requests.filter((r) => r.server === 'cdn').length, 0, 'no byte of the file was fetched')
  assert.equal(await exists(join(node.dataDir, 'models', 'meshnode-test')), false)
})

test('the disk check counts what running downloads will still write, and evicts for disk like for the budget', async (t) => {
  const dir = await tempDir(t)
  const db = openDatabase(join(dir, 'meshnode.db'))
  t.after(() => { db.close() })
  const records = new ModelRecords({ db })
  const settings = { max_storage_gb: 1000, auto_manage_models: false }
  const events = new EventEmitter<ModelEventMap>()
  const budget = new StorageBudget({ records, settings: { get: () => settings }, inUse: () => false, events, log: pino({ level: 'silent' }) },
    { dir, diskHeadroomBytes: 100 })
  const disk = { freeBytes: 10_100 } // 10,000 usable past the headroom

  const first = budget.reserve('a', 'a', 6_000, disk)
  assert.deepEqual(first, { evicted: [], maxBytes: 10_000 })
  assert.throws(() => budget.reserve('b', 'b', 6_000, disk), (err: unknown) => {
    assert.ok(err instanceof InsufficientDiskError)
    assert.match(err.message, /needs 6\.0 kB \(6000 bytes\) more, .*downloads in progress will still write 6\.0 kB \(6000 bytes\)/)
    return true
  })
  // Once a has written most of its file, the disk that statfs reports has already paid for it
  budget.written('a', 5_000)
  assert.deepEqual(budget.reserve('b', 'b', 6_000, { freeBytes: 7_100 }), { evicted: [], maxBytes: 6_000 })
  budget.release('a')
  budget.release('b')

  // A resumed .part is on disk already: only the rest must fit
  assert.deepEqual(budget.reserve('c', 'c', 9_000, { freeBytes: 3_100 }, 7_000), { evicted: [], maxBytes: 10_000 })
  budget.release('c')

  // With auto_manage_models on, a downloaded model is evicted to free disk, not only budget
  records.startDownloading({ model_key: 'old', model_id: 'old', repo: 'o/r', file: 'old.gguf', path: 'o/r/old.gguf', size_bytes: 4_000, sha256: null, revision: null }, null)
  records.markDownloaded('old', 4_000, 'f'.repeat(64))
  assert.throws(() => budget.reserve('d', 'd', 5_000, { freeBytes: 2_100 }), InsufficientDiskError)
  settings.auto_manage_models = true
  const evictedEvents: string[] = []
  events.on('model.evicted', ({ modelID }) => evictedEvents.push(modelID))
  const granted = budget.reserve('d', 'd', 5_000, { freeBytes: 2_100 })
  assert.deepEqual(granted.evicted.map((row) => row.model_key), ['old'])
  assert.deepEqual(evictedEvents, ['old'])
  assert.equal(records.get('old'), null)
})

test('a chat marks its model used in memory only; the batch write lands it in the database', async (t) => {
  const { hub } = await hubWithTiny(t)
  const node = await startTestNode(t, { hfEndpoint: hub.url })
  assert.equal((await node.api.post('/v1/app/models/download', { modelID: MODEL })).status, 200)
  await waitFor(async () => (await node.api.get('/v1/app/models')).body.models.find((m: { modelID: string }) => m.modelID === MODEL)?.status === 'downloaded',
    { what: 'the download' })
  assert.equal((await node.api.post('/v1/app/models/load', { modelID: MODEL })).status, 200)
  const loadedAt = lastUsedInDatabase(node, MODEL)
  assert.ok(loadedAt != null, 'a load is a use, written with the load')

  const chat = await node.api.post('/v1/chat/completions', { model: MODEL, messages: [{ role: 'user', content: 'Hi' }], max_tokens: 2 })
  assert.equal(chat.status, 200, JSON.stringify(chat.body))
  assert.equal(lastUsedInDatabase(node, MODEL), loadedAt, 'the chat path wrote nothing')

  node.node.models.flushUsage()
  const flushed = lastUsedInDatabase(node, MODEL)
  assert.ok(flushed != null && flushed > loadedAt, `flushed ${flushed} after ${loadedAt}`)
})

test('the imported-models migration keeps the model to reload, which then no longer needs a row in models', async (t) => {
  const dir = await tempDir(t)
  const path = join(dir, 'meshnode.db')
  const imported = MIGRATIONS.findIndex((sql) => sql.includes('CREATE TABLE imported_models'))
  assert.ok(imported > 0)
  const old = new DatabaseSync(path)
  old.exec('CREATE TABLE schema_version (version INTEGER NOT NULL); INSERT INTO schema_version (version) VALUES (0)')
  for (const sql of MIGRATIONS.slice(0, imported)) old.exec(sql)
  old.prepare('UPDATE schema_version SET version = ?').run(imported)
  old.exec(`INSERT INTO models (model_key, model_id, repo, file, path, status, size_bytes, sha256, created_at)
    VALUES ('m', 'm', 'o/r', 'm.gguf', 'o/r/m.gguf', 'downloaded', 1, '${'a'.repeat(64)}', '2025-01-01T00:00:00.000Z');
    INSERT INTO loaded_model (id, model_key) VALUES (1, 'm')`)
  old.close()

  const db = openDatabase(path)
  t.after(() => { db.close() })
  const records = new ModelRecords({ db })
  assert.deepEqual(records.loadedKeys(), ['m'], 'the model loaded before the migration to several is still reloaded')
  records.remove(['m'])
  assert.deepEqual(records.loadedKeys(), [], 'removing a model forgets it as one to reload')
  records.markLoaded('an-imported-file', 512, true)
  records.markLoaded('for-a-request', 512, false)
  records.markLoaded('another', 512, true)
  assert.deepEqual(records.loadedKeys().sort(), ['an-imported-file', 'another'], 'explicit loads are reloaded, loads for a request are not')
  records.forgetLoaded('another')
  assert.deepEqual(records.loadedKeys(), ['an-imported-file'])
  records.forgetLoaded()
  assert.deepEqual(records.loadedKeys(), [])
})
