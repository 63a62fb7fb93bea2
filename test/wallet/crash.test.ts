// kill -9 in the middle of transfers, of the payee and then of the payer: after a restart both ledgers converge and
// nothing is counted twice. The nodes are separate processes (`meshnode serve`), so the kill is a real one.
import assert from 'node:assert/strict'
import { test, type TestContext } from 'node:test'
import { startTestRelay, wanSettings, type TestRelay } from '../support/network.ts'
import { Api, exitOf, spawnNodeProcess, tempDir, waitFor, type NodeProcess } from '../support/node.ts'

interface Tx { id: string, type: string, amount: number, peerID: string | null }
interface Summary { currentBalance: number, totalEarned: number, totalSpent: number, pendingTransfers: number }

interface ProcessNode {
  proc: NodeProcess
  api: Api
  nodeID: string
  dataDir: string
}

async function spawnNode (t: TestContext, relay: TestRelay, dataDir: string): Promise<ProcessNode> {
  const proc = await spawnNodeProcess(t, ['--data-dir', dataDir])
  const api = new Api(proc.url)
  const health = await api.get('/health')
  // WAN is switched on through the API the first time; a restarted node reads it from its database.
  if ((await api.get('/v1/app')).body.settings.wan_enabled !== true) {
    assert.equal((await api.patch('/v1/app/settings', wanSettings(relay))).status, 200)
  }
  return { proc, api, nodeID: health.body.nodeID as string, dataDir }
}

async function killHard (node: ProcessNode): Promise<void> {
  node.proc.child.kill('SIGKILL')
  assert.equal((await exitOf(node.proc.child)).signal, 'SIGKILL')
}

async function sees (node: ProcessNode, peer: ProcessNode): Promise<void> {
  await waitFor(async () => ((await node.api.get('/v1/app/peers')).body.peers as Array<{ nodeID: string }>).some((p) => p.nodeID === peer.nodeID),
    { timeoutMs: 30_000, what: `${node.nodeID.slice(0, 8)} to see ${peer.nodeID.slice(0, 8)}` })
}

async function summary (node: ProcessNode): Promise<Summary> {
  return (await node.api.get('/v1/app/wallet')).body as Summary
}

async function ids (node: ProcessNode, type: string): Promise<string[]> {
  return ((await node.api.get('/v1/app/wallet/transactions?limit=500')).body.transactions as Tx[]).filter((tx) => tx.type === type).map((tx) => tx.id).sort()
}

/** Fires `count` concurrent sends; resolves with the ids of those the node accepted (a kill may cut the others). */
function burst (from: ProcessNode, to: ProcessNode, count: number): Promise<string[]> {
  return Promise.all(Array.from({ length: count }, async (_, i) => {
    try {
      const res = await from.api.post('/v1/app/wallet/send', { amount: 0.5, peerID: to.nodeID, memo: `burst ${i}` })
      return res.status === 200 ? res.body.transactionID as string : null
    } catch (err) {
      // The payer was killed under this request: its debit may or may not have committed; the ledgers say which.
      if (err instanceof TypeError) return null
      throw err
    }
  })).then((all) => all.filter((id): id is string => id != null))
}

/** Both ledgers agree: the payer's spends are exactly the payee's earns, each once, and nothing is pending. */
async function converged (payer: ProcessNode, payee: ProcessNode, accepted: string[]): Promise<void> {
  await waitFor(async () => (await summary(payer)).pendingTransfers === 0, { timeoutMs: 60_000, what: 'the payer to deliver every transfer' })
  const spent = await ids(payer, 'spend')
  const earned = await ids(payee, 'earn')
  assert.deepEqual(earned, spent, 'every spend earned once, and nothing earned that was not spent')
  assert.equal(new Set(earned).size, earned.length)
  for (const id of accepted) assert.ok(spent.includes(id), `accepted send ${id} is in the ledger`)
  const [a, b] = [await summary(payer), await summary(payee)]
  assert.equal(Math.round((a.currentBalance + b.currentBalance) * 1e6), 200_000_000, 'conserved')
}

test('kill -9 of the payee, then of the payer, in the middle of transfers: the ledgers converge, nothing twice', async (t) => {
  const relay = await startTestRelay(t)
  let a = await spawnNode(t, relay, await tempDir(t))
  let b = await spawnNode(t, relay, await tempDir(t))
  await Promise.all([sees(a, b), sees(b, a)])

  // The payee dies while transfers are arriving: killed as soon as the first one has been credited.
  const firstBurst = burst(a, b, 40)
  await waitFor(async () => (await summary(b)).totalEarned > 0, { what: 'the first credit at the payee' })
  await killHard(b)
  const acceptedFirst = await firstBurst
  t.diagnostic(`payee killed with ${(await summary(a)).pendingTransfers} of ${acceptedFirst.length} transfers unacknowledged`)
  b = await spawnNode(t, relay, b.dataDir)
  await converged(a, b, acceptedFirst)

  // The payer dies while its sends are being accepted and delivered.
  await Promise.all([sees(a, b), sees(b, a)])
  const earnedBefore = (await summary(b)).totalEarned
  const secondBurst = burst(a, b, 40)
  await waitFor(async () => (await summary(b)).totalEarned > earnedBefore, { what: 'the first credit of the second burst' })
  await killHard(a)
  const acceptedSecond = await secondBurst
  a = await spawnNode(t, relay, a.dataDir)
  t.diagnostic(`payer restarted with ${(await summary(a)).pendingTransfers} transfers still to deliver`)
  await converged(a, b, [...acceptedFirst, ...acceptedSecond])
  assert.ok((await summary(a)).currentBalance >= 0)
})
