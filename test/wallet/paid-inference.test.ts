// Paid remote inference between real nodes: the requester pays the server exactly price × generated tokens.
import assert from 'node:assert/strict'
import { join } from 'node:path'
import { test } from 'node:test'
import { startTestRelay, waitForPeers } from '../support/network.ts'
import { tempDir, waitFor, type Api, type TestNode } from '../support/node.ts'
import { metric, settled, startPeer } from '../support/peers.ts'
import { writeTinyGguf } from '../support/tiny-gguf.ts'

const MODEL = 'tiny-chat'
const messages = [{ role: 'user', content: 'Count to ten.' }]
const SERVED = 'meshnode_peer_requests_served_total'

interface Summary { currentBalance: number, totalEarned: number, totalSpent: number, transactionCount: number, pendingTransfers: number }

async function summary (api: Api): Promise<Summary> {
  return (await api.get('/v1/app/wallet')).body as Summary
}

function micro (credits: number): number {
  return Math.round(credits * 1e6)
}

/** B's price as A sees it in B's signed record, once it is `expected` (when given). */
async function advertisedPriceMicro (a: TestNode, b: TestNode, expected?: (micro: number) => boolean): Promise<number> {
  return await waitFor(async () => {
    const peer = ((await a.api.get('/v1/app/peers')).body.peers as Array<{ nodeID: string, pricePer1kTokens: number }>).find((p) => p.nodeID === b.nodeID)
    if (peer == null) return undefined
    const price = micro(peer.pricePer1kTokens)
    return expected == null || expected(price) ? price : undefined
  }, { what: "B's price in A's peer table" })
}

test('paid remote inference: each requester pays the server exactly ceil(price × tokens / 1000), recorded on both sides', async (t) => {
  const relay = await startTestRelay(t)
  const { path } = await writeTinyGguf(join(await tempDir(t, 'meshnode-model-'), 'tiny.gguf'), { seed: 7 })
  // A high electricity cost makes the tiny model's price large enough that an off-by-one would show.
  const [a, b, c] = await Promise.all([startPeer(t, relay), startPeer(t, relay, { model: { id: MODEL, path }, settings: { electricity_cost: 5000 } }), startPeer(t, relay)])
  const nodes = [a, b, c]
  await Promise.all([waitForPeers(a, [b.nodeID, c.nodeID]), waitForPeers(b, [a.nodeID, c.nodeID]), waitForPeers(c, [a.nodeID, b.nodeID])])
  const price = await advertisedPriceMicro(a, b)
  assert.ok(price > 1000, `a price that shows rounding: ${price}`)

  const expectedCosts: Array<[TestNode, number]> = []
  for (const [requester, maxTokens] of [[a, 7], [c, 3], [a, 11]] as const) {
    const res = await requester.api.post('/v1/chat/completions', { model: MODEL, messages, max_tokens: maxTokens, temperature: 0 })
    assert.equal(res.status, 200, JSON.stringify(res.body))
    assert.equal(res.headers.get('x-served-by'), `peer:${b.nodeID}`)
    assert.equal(res.body.usage.completion_tokens, maxTokens, 'the tiny model never stops on its own')
    expectedCosts.push([requester, Math.ceil(price * maxTokens / 1000)])
  }
  await settled(nodes)

  const paidBy = (node: TestNode): number => expectedCosts.filter(([n]) => n === node).reduce((sum, [, cost]) => sum + cost, 0)
  const total = paidBy(a) + paidBy(c)
  assert.equal(micro((await summary(a.api)).currentBalance), 100_000_000 - paidBy(a))
  assert.equal(micro((await summary(c.api)).currentBalance), 100_000_000 - paidBy(c))
  assert.equal(micro((await summary(b.api)).currentBalance), 100_000_000 + total)
  assert.equal(micro((await summary(b.api)).totalEarned), total)
  let sum = 0
  for (const node of nodes) sum += micro((await summary(node.api)).currentBalance)
  assert.equal(sum, 300_000_000, 'conserved')

  // Each payment is one `spend` at the requester and one `earn` at the server, under the same id and memo.
  const spends = ((await a.api.get('/v1/app/wallet/transactions')).body.transactions as Array<Record<string, unknown>>).filter((tx) => tx.type === 'spend')
  const earns = ((await b.api.get('/v1/app/wallet/transactions')).body.transactions as Array<Record<string, unknown>>).filter((tx) => tx.type === 'earn')
  assert.deepEqual(spends.map((tx) => [micro(tx.amount as number), tx.peerID, tx.memo]),
    [[Math.ceil(price * 11 / 1000), b.nodeID, `inference: ${MODEL}`], [Math.ceil(price * 7 / 1000), b.nodeID, `inference: ${MODEL}`]])
  for (const spend of spends) {
    const earn = earns.find((tx) => tx.id === spend.id)
    assert.deepEqual({ amount: earn?.amount, peerID: earn?.peerID, memo: earn?.memo }, { amount: spend.amount, peerID: a.nodeID, memo: `inference: ${MODEL}` })
  }
})

test('a requester that cannot pay the most a request may cost gets 402 before the peer does any work', async (t) => {
  const relay = await startTestRelay(t)
  const { path } = await writeTinyGguf(join(await tempDir(t, 'meshnode-model-'), 'tiny.gguf'), { seed: 7 })
  const [a, b] = await Promise.all([startPeer(t, relay), startPeer(t, relay, { model: { id: MODEL, path } })])
  await Promise.all([waitForPeers(a, [b.nodeID]), waitForPeers(b, [a.nodeID])])
  const cheap = await advertisedPriceMicro(a, b)
  assert.equal((await b.api.patch('/v1/app/settings', { electricity_cost: 1_000_000, electricity_margin: 1000 })).status, 200)
  const price = await advertisedPriceMicro(a, b, (p) => p !== cheap)
  // Just more tokens than 100 credits pay for; without max_tokens, the default hold of 1024 tokens is more still.
  const maxTokens = Math.floor(100_000_000 * 1000 / price) + 1
  assert.ok(maxTokens < 1024, `price ${price}`)
  const before = await summary(a.api)
  const servedBefore = await metric(b.api, SERVED)

  for (const body of [
    { model: MODEL, messages, max_tokens: maxTokens },
    { model: MODEL, messages },
    { model: MODEL, messages, max_tokens: maxTokens, stream: true } // streaming too: the status comes before the stream
  ]) {
    const res = await a.api.post('/v1/chat/completions', body)
    assert.equal(res.status, 402, JSON.stringify(res.body))
    assert.equal(res.body.error.type, 'insufficient_credits')
  }
  assert.deepEqual(await summary(a.api), before, 'nothing spent')
  assert.equal(await metric(b.api, SERVED), servedBefore, 'the peer generated nothing')

  // One token fewer is affordable: served and paid.
  const affordable = await a.api.post('/v1/chat/completions', { model: MODEL, messages, max_tokens: maxTokens - 1 })
  assert.equal(affordable.status, 200, JSON.stringify(affordable.body))
  await waitFor(async () => (await summary(b.api)).totalEarned > 0, { what: 'the payment to arrive' })
  assert.equal(micro((await summary(a.api)).currentBalance), 100_000_000 - Math.ceil(price * (maxTokens - 1) / 1000))
})
