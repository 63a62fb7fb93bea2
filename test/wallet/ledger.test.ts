// The ledger on a real SQLite file: the invariants hold in the database, not only in the service around it.
import assert from 'node:assert/strict'
import { randomUUID } from 'node:crypto'
import { join } from 'node:path'
import { test, type TestContext } from 'node:test'
import { generateSeed, identityFromSeed } from '../../src/identity/index.ts'
import { openDatabase, type Database } from '../../src/store/index.ts'
import { GRANT_MICRO, Ledger, creditsToMicro, inferenceCostMicro, parameterCount, pricePer1kTokensMicro, signTransfer } from '../../src/wallet/index.ts'
import { tempDir } from '../support/node.ts'

const alice = identityFromSeed(generateSeed())
const bob = identityFromSeed(generateSeed())

async function openLedger (t: TestContext): Promise<{ ledger: Ledger, db: Database, path: string }> {
  const path = join(await tempDir(t), 'meshnode.db')
  const db = openDatabase(path)
  t.after(() => { if (db.isOpen) db.close() })
  return { ledger: new Ledger({ db }), db, path }
}

function outgoing (amountMicro: number, memo = ''): Parameters<Ledger['send']>[0] {
  const body = { id: randomUUID(), from: alice.nodeID, to: bob.nodeID, amountMicro, memo, createdAt: new Date().toISOString() }
  return { id: body.id, peerID: bob.nodeID, amountMicro, memo, createdAt: body.createdAt, signature: signTransfer(alice, body).signature }
}

function incoming (amountMicro: number, id: string = randomUUID()): Parameters<Ledger['receive']>[0] {
  const body = { id, from: bob.nodeID, to: alice.nodeID, amountMicro, memo: 'x', createdAt: new Date().toISOString() }
  return { id, peerID: bob.nodeID, amountMicro, memo: 'x', createdAt: body.createdAt, signature: signTransfer(bob, body).signature }
}

/** balance = grants + earned - spent, recomputed from the append-only log. */
function assertBalanced (db: Database, ledger: Ledger): void {
  const row = db.prepare(`SELECT COALESCE(SUM(CASE type WHEN 'spend' THEN -amount_micro ELSE amount_micro END), 0) AS sum FROM wallet_transactions`).get() as { sum: number }
  assert.equal(ledger.balanceMicro(), row.sum)
  assert.ok(ledger.balanceMicro() >= 0)
}

test('a new ledger holds the 100-credit grant, exactly once across reopenings', async (t) => {
  const { ledger, db, path } = await openLedger(t)
  assert.equal(ledger.balanceMicro(), GRANT_MICRO)
  const again = new Ledger({ db })
  assert.equal(again.balanceMicro(), GRANT_MICRO)
  db.close()
  const reopened = openDatabase(path)
  t.after(() => { reopened.close() })
  const third = new Ledger({ db: reopened })
  assert.equal(third.balanceMicro(), GRANT_MICRO)
  assert.deepEqual(third.transactions(10).map((tx) => [tx.type, tx.amountMicro, tx.peerID]), [['grant', GRANT_MICRO, null]])
  // The unique index is the backstop: a second grant row cannot exist even if code tried to add one.
  assert.throws(() => reopened.prepare("INSERT INTO wallet_transactions (id, type, amount_micro, memo, timestamp) VALUES ('x', 'grant', 1, '', '')").run(), /UNIQUE/)
})

test('sends never overdraw: 200 sends of 0.7 credits from 100 leave a non-negative, balanced ledger', async (t) => {
  const { ledger, db } = await openLedger(t)
  let accepted = 0
  let refused = 0
  for (let i = 0; i < 200; i++) {
    try {
      ledger.send(outgoing(700_000))
      accepted++
    } catch (err) {
      assert.equal((err as Error).name, 'InsufficientCreditsError')
      refused++
    }
  }
  assert.equal(accepted, Math.floor(GRANT_MICRO / 700_000))
  assert.equal(refused, 200 - accepted)
  assert.equal(ledger.balanceMicro(), GRANT_MICRO - accepted * 700_000)
  assert.equal(ledger.totals().pendingTransfers, accepted)
  assert.equal(ledger.dueTransfers(Date.now(), { limit: 500 }).length, accepted)
  assertBalanced(db, ledger)
  // The CHECK constraint is the backstop under the service's own check.
  assert.throws(() => db.prepare('UPDATE wallet_balance SET balance_micro = -1').run(), /CHECK/)
})

test('a refused send changes nothing; held credits count as spent for the check', async (t) => {
  const { ledger, db } = await openLedger(t)
  const before = ledger.totals()
  assert.throws(() => ledger.send(outgoing(GRANT_MICRO + 1)), { name: 'InsufficientCreditsError' })
  assert.throws(() => ledger.send(outgoing(10_000_000), { heldMicro: 95_000_000 }), { name: 'InsufficientCreditsError', message: /held for requests in flight/ })
  assert.deepEqual(ledger.totals(), before)
  assert.equal(db.prepare('SELECT COUNT(*) AS n FROM wallet_transfers').get()?.n, 0)
  ledger.send(outgoing(5_000_000), { heldMicro: 95_000_000 })
  assert.equal(ledger.balanceMicro(), 95_000_000)
})

test('an incoming transfer is applied once; a replay is a duplicate; a reused id with other content is a conflict', async (t) => {
  const { ledger, db } = await openLedger(t)
  const transfer = incoming(2_500_000)
  assert.equal(ledger.receive(transfer), 'applied')
  assert.equal(ledger.receive(transfer), 'duplicate')
  // Same id, same signed fields, handed in again as another object: still the same transfer.
  assert.equal(ledger.receive(structuredClone(transfer)), 'duplicate')
  assert.equal(ledger.receive(incoming(9_000_000, transfer.id)), 'conflict')
  // One of our own outgoing ids can never come back as income.
  const sent = outgoing(1_000_000)
  ledger.send(sent)
  assert.equal(ledger.receive({ ...incoming(1_000_000, sent.id) }), 'conflict')
  assert.equal(ledger.balanceMicro(), GRANT_MICRO + 2_500_000 - 1_000_000)
  assert.equal(ledger.totals().earnedMicro, 2_500_000)
  assertBalanced(db, ledger)
})

test('a peer\'s batch of transfers is taken in one commit, each with the outcome it would have alone, in order', async (t) => {
  const { ledger, db } = await openLedger(t)
  const seen: number[] = []
  const balances: number[] = []
  ledger.events.on('transaction', (transaction, balance) => {
    seen.push(transaction.amountMicro)
    balances.push(balance)
  })
  const first = incoming(1_000_000)
  const sent = outgoing(500_000)
  ledger.send(sent)
  seen.length = 0
  balances.length = 0
  const outcomes = ledger.receiveAll([first, incoming(2_000_000), first, incoming(9_000_000, first.id), incoming(700_000, sent.id), incoming(3_000_000)])
  assert.deepEqual(outcomes, ['applied', 'applied', 'duplicate', 'conflict', 'conflict', 'applied'])
  assert.deepEqual(seen, [1_000_000, 2_000_000, 3_000_000], 'one event per credit, after the commit')
  const start = GRANT_MICRO - 500_000
  assert.deepEqual(balances, [start + 1_000_000, start + 3_000_000, start + 6_000_000], 'each with the balance after it')
  assert.equal(ledger.balanceMicro(), GRANT_MICRO - 500_000 + 6_000_000)
  assert.deepEqual(ledger.receiveAll([]), [])
  assertBalanced(db, ledger)
})

test('a credit that would pass 2^53 micro-credits is refused and changes nothing', async (t) => {
  const { ledger } = await openLedger(t)
  for (let i = 0; i < 9; i++) assert.equal(ledger.receive(incoming(1e15)), 'applied') // the protocol's largest transfer
  const before = ledger.totals()
  assert.equal(ledger.receive(incoming(1e15)), 'over_limit')
  assert.deepEqual(ledger.totals(), before)
  assert.ok(Number.isSafeInteger(ledger.balanceMicro()))
})

test('the outbox: acknowledged transfers leave it, deferred ones wait for their time', async (t) => {
  const { ledger } = await openLedger(t)
  const first = outgoing(1)
  const second = outgoing(2)
  ledger.send(first)
  ledger.send(second)
  const now = Date.now()
  ledger.deferTransfers([second.id], now + 60_000, 'unreachable')
  assert.deepEqual(ledger.dueTransfers(now, { limit: 10 }).map((t) => t.id), [first.id])
  assert.equal(ledger.nextAttemptMs(), 0)
  ledger.markAcknowledged(first.id)
  ledger.markAcknowledged(first.id)
  assert.equal(ledger.nextAttemptMs(), now + 60_000)
  assert.deepEqual(ledger.duePeers(now), [])
  ledger.retryNow(bob.nodeID)
  assert.deepEqual(ledger.dueTransfers(now, { peerID: bob.nodeID, limit: 10 }).map((t) => [t.id, t.attempts]), [[second.id, 1]])
  assert.equal(ledger.totals().pendingTransfers, 1)
})

test('transactions list newest first, with the requested limit, in pages by offset; each commit is an event', async (t) => {
  const { ledger } = await openLedger(t)
  const events: Array<[string, number]> = []
  ledger.events.on('transaction', (tx, balanceMicro) => { events.push([tx.memo, balanceMicro]) })
  for (let i = 1; i <= 5; i++) ledger.send(outgoing(i, `send ${i}`))
  assert.deepEqual(ledger.transactions(3).map((tx) => tx.memo), ['send 5', 'send 4', 'send 3'])
  assert.deepEqual(ledger.transactions(500).map((tx) => tx.type), ['spend', 'spend', 'spend', 'spend', 'spend', 'grant'])
  assert.deepEqual(ledger.transactions(2, 2).map((tx) => tx.memo), ['send 3', 'send 2'])
  assert.deepEqual(ledger.transactions(2, 4).map((tx) => tx.memo), ['send 1', 'welcome grant'])
  assert.deepEqual(ledger.transactions(2, 6), [])
  assert.deepEqual(events.map(([memo]) => memo), ['send 1', 'send 2', 'send 3', 'send 4', 'send 5'])
  assert.equal(events.at(-1)?.[1], ledger.balanceMicro())
})

test('pricing: the documented formula, clamped, in integer micro-credits', () => {
  const settings = { electricity_cost: 0.12, electricity_margin: 1.2 }
  // 4 GB of weights: 4 × 2 J × 1000 / 3.6e6 kWh × 0.12 × 1.2 × 100 credits = 0.032 credits = 32,000 micro-credits.
  assert.equal(pricePer1kTokensMicro({ sizeBytes: 4e9, quantization: 'Q4_K_M', parameters: '7B' }, settings), 32_000)
  // Without a size: 7e9 parameters × 4.85 bits / 8 = 4.24375e9 bytes.
  assert.equal(pricePer1kTokensMicro({ sizeBytes: null, quantization: 'q4_k_m', parameters: '7B' }, settings), Math.ceil(4.24375 * 8_000 - 1e-6))
  assert.ok(pricePer1kTokensMicro({ sizeBytes: null, quantization: 'Q8_0', parameters: '7B' }, settings) >
    pricePer1kTokensMicro({ sizeBytes: null, quantization: 'Q4_0', parameters: '7B' }, settings), 'more bits per weight cost more')
  assert.equal(pricePer1kTokensMicro({ sizeBytes: 4e9, quantization: null, parameters: null }, { electricity_cost: 0, electricity_margin: 1 }), 1, 'never free')
  assert.equal(pricePer1kTokensMicro({ sizeBytes: 1e15, quantization: null, parameters: null }, { electricity_cost: 1e6, electricity_margin: 1000 }), 1e12, 'capped')
  assert.equal(pricePer1kTokensMicro({ sizeBytes: 4e9, quantization: null, parameters: null }, { electricity_cost: 0.24, electricity_margin: 1.2 }), 64_000, 'linear in the cost')
  assert.equal(parameterCount('135M'), 135e6)
  assert.equal(parameterCount('8x7B'), 56e9)
  assert.equal(parameterCount('1.5b'), 1.5e9)
  assert.equal(parameterCount('large'), null)

  assert.equal(inferenceCostMicro(32_000, 1000), 32_000)
  assert.equal(inferenceCostMicro(32_000, 1), 32, 'exact when it divides')
  assert.equal(inferenceCostMicro(1, 1), 1, 'rounded up once per request')
  assert.equal(inferenceCostMicro(999, 1001), 1000)
  assert.equal(inferenceCostMicro(1234, 0), 0)
  assert.equal(inferenceCostMicro(1e12, 8_000_000), 8e15, 'exact beyond 2^53 before the division')
  assert.throws(() => inferenceCostMicro(1.5, 10), RangeError)
  assert.throws(() => inferenceCostMicro(10, -1), RangeError)
})

test('credits to micro-credits at the HTTP edge is exact for every 6-decimal amount', () => {
  for (const [credits, micro] of [[0.000001, 1], [0.1, 100_000], [1.5, 1_500_000], [99.999999, 99_999_999], [123456789.123456, 123456789123456]] as const) {
    assert.equal(creditsToMicro(credits), micro)
    assert.equal(micro / 1e6, credits)
  }
})
