// The kept responses' limits on a real SQLite file: age, count, size per response and in all, and the requester scope.
import { test, type TestContext } from 'node:test'
import assert from 'node:assert/strict'
import { join } from 'node:path'
import { NotFoundError } from '../../src/errors.ts'
import { StoredResponses } from '../../src/responses/index.ts'
import { openDatabase } from '../../src/store/index.ts'
import { tempDir } from '../support/node.ts'

async function openStore (t: TestContext, options: ConstructorParameters<typeof StoredResponses>[1]): Promise<StoredResponses> {
  const db = openDatabase(join(await tempDir(t), 'meshnode.db'))
  t.after(() => { db.close() })
  return new StoredResponses({ db }, options)
}

const conversation = [{ role: 'user' as const, content: 'Hello' }, { role: 'assistant' as const, content: 'Hi', toolCalls: null }]
const keep = (store: StoredResponses, id: string, requester = 'local', text = 'Hi'): boolean =>
  store.save({ id, requester, conversation, answer: { id, text } })

test('a kept response reads back whole, for its requester only, until it is deleted or expires', async (t) => {
  let now = Date.parse('2025-01-01T00:00:00Z')
  const store = await openStore(t, { ttlMs: 1000, now: () => now })
  assert.equal(keep(store, 'resp_a'), true)
  const kept = store.get('resp_a', 'local')
  assert.deepEqual(kept.conversation, conversation)
  assert.deepEqual(kept.answer, { id: 'resp_a', text: 'Hi' })
  assert.equal(kept.createdAt, '2025-01-01T00:00:00.000Z')
  assert.throws(() => store.get('resp_a', 'key:other'), NotFoundError)
  assert.throws(() => { store.delete('resp_a', 'key:other') }, NotFoundError)
  assert.equal(store.get('resp_a', 'local').id, 'resp_a', 'another requester deleted nothing')

  keep(store, 'resp_b')
  store.delete('resp_b', 'local')
  assert.throws(() => store.get('resp_b', 'local'), /Response not found: resp_b/)

  now += 1001
  assert.throws(() => store.get('resp_a', 'local'), NotFoundError, 'expired, though no save has dropped it yet')
})

test('the oldest go first beyond the count or the total size; one too large is not kept', async (t) => {
  const counted = await openStore(t, { maxResponses: 3 })
  for (const id of ['r1', 'r2', 'r3', 'r4']) keep(counted, id)
  assert.throws(() => counted.get('r1', 'local'), NotFoundError)
  for (const id of ['r2', 'r3', 'r4']) assert.equal(counted.get(id, 'local').id, id)

  const weighed = await openStore(t, { maxResponseBytes: 2000, maxTotalBytes: 5000 })
  assert.equal(keep(weighed, 'huge', 'local', 'x'.repeat(2000)), false)
  assert.throws(() => weighed.get('huge', 'local'), NotFoundError)
  // Three of ~1.9 KB after two small ones: the newest that fit in 5,000 bytes stay, everything older goes
  for (const id of ['s1', 's2', 'big1', 'big2', 'big3']) keep(weighed, id, 'local', id.startsWith('big') ? 'x'.repeat(1800) : 'Hi')
  for (const id of ['big2', 'big3']) assert.equal(weighed.get(id, 'local').id, id)
  for (const id of ['s1', 's2', 'big1']) assert.throws(() => weighed.get(id, 'local'), NotFoundError, id)
})
