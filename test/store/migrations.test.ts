// Databases written by older meshnode versions, opened by this one: every migration from the first schema version
// runs, and what the older version stored is still there and still means the same thing.
import assert from 'node:assert/strict'
import { randomUUID } from 'node:crypto'
import { join } from 'node:path'
import { test } from 'node:test'
import { generateSeed, identityFromSeed } from '../../src/identity/index.ts'
import { ApiKeys } from '../../src/keys/index.ts'
import { SettingsStore } from '../../src/settings/index.ts'
import { openDatabase } from '../../src/store/index.ts'
import { MIGRATIONS } from '../../src/store/migrations.ts'
import { Ledger, signTransfer, storedEnvelope } from '../../src/wallet/index.ts'
import { olderDatabase, versionBefore } from '../support/database.ts'
import { tempDir } from '../support/node.ts'

test('a database of the first schema version migrates to the newest and keeps its settings and keys', async (t) => {
  const path = join(await tempDir(t), 'meshnode.db')
  const old = olderDatabase(path, 1)
  old.prepare('INSERT INTO settings (key, value) VALUES (?, ?)').run('max_storage_gb', '7')
  old.prepare('INSERT INTO api_keys (id, name, hash, prefix, created) VALUES (?, ?, ?, ?, ?)').run('key-1', 'laptop', 'ab'.repeat(32), 'mn-abcd', '2025-01-01T00:00:00.000Z')
  old.close()

  const db = openDatabase(path)
  t.after(() => { db.close() })
  assert.equal(db.prepare('SELECT version FROM schema_version').get()?.version, MIGRATIONS.length)
  assert.equal(new SettingsStore({ db }).get().max_storage_gb, 7)
  assert.deepEqual(new ApiKeys({ db }, { adminToken: 'x'.repeat(43) }).list().map((key) => [key.id, key.name]), [['key-1', 'laptop']])
  // The tables of later versions exist and work: a ledger with its grant, the agent profile row.
  assert.equal(new Ledger({ db }).balanceMicro(), 100_000_000)
  assert.deepEqual(db.prepare('SELECT id FROM agent_profile').all().map((row) => ({ ...row })), [{ id: 1 }])
})

test('transfers stored as envelope JSON become checked fields and a signature, and verify again when read back', async (t) => {
  const path = join(await tempDir(t), 'meshnode.db')
  const me = identityFromSeed(generateSeed())
  const peer = identityFromSeed(generateSeed())
  const out = { id: randomUUID(), from: me.nodeID, to: peer.nodeID, amountMicro: 1_500_000, memo: 'lunch', createdAt: new Date().toISOString() }
  const inc = { id: randomUUID(), from: peer.nodeID, to: me.nodeID, amountMicro: 2_000_000, memo: 'ü'.repeat(3), createdAt: new Date().toISOString() }
  const old = olderDatabase(path, versionBefore('wallet_transfers_v6'))
  const insert = old.prepare('INSERT INTO wallet_transfers (id, direction, peer_id, amount_micro, envelope, state, attempts) VALUES (?, ?, ?, ?, ?, ?, ?)')
  insert.run(out.id, 'outgoing', peer.nodeID, out.amountMicro, JSON.stringify(signTransfer(me, out)), 'pending', 3)
  insert.run(inc.id, 'incoming', peer.nodeID, inc.amountMicro, JSON.stringify(signTransfer(peer, inc)), 'received', 0)
  old.close()

  const db = openDatabase(path)
  t.after(() => { db.close() })
  const ledger = new Ledger({ db })
  const [due] = ledger.dueTransfers(Date.now(), { limit: 10 })
  assert.deepEqual(due, { id: out.id, peerID: peer.nodeID, amountMicro: 1_500_000, memo: 'lunch', createdAt: out.createdAt, signature: signTransfer(me, out).signature, attempts: 3 })
  // The outbox rebuilds the envelope from the row and checks it before it goes out again.
  assert.deepEqual(storedEnvelope({ id: due.id, from: me.nodeID, to: due.peerID, amountMicro: due.amountMicro, memo: due.memo, createdAt: due.createdAt, signature: due.signature }), signTransfer(me, out))
  // The incoming one is still known: the same transfer again is a duplicate, and the id with other content a conflict.
  const again = { id: inc.id, peerID: peer.nodeID, amountMicro: inc.amountMicro, memo: inc.memo, createdAt: inc.createdAt, signature: signTransfer(peer, inc).signature }
  assert.equal(ledger.receive(again), 'duplicate')
  assert.equal(ledger.receive({ ...again, amountMicro: 3_000_000 }), 'conflict')
})
