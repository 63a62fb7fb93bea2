// Credits moving between real nodes on loopback (a relay, WAN on), and the transfer protocol facing a hostile peer.
import assert from 'node:assert/strict'
import { randomUUID } from 'node:crypto'
import { test } from 'node:test'
import { multiaddr } from '@multiformats/multiaddr'
import type { Stream } from '@libp2p/interface'
import { generateSeed, identityFromSeed, type NodeIdentity } from '../../src/identity/index.ts'
import { createPeerHost, nodeIDToPeerId, openStream, type PeerHost } from '../../src/network/host/libp2p-node.ts'
import { openFrames, readMessage, signEnvelope, writeMessage } from '../../src/wire/index.ts'
import { MAX_TRANSFER_MICRO, TRANSFER_DOMAIN, TRANSFER_PROTOCOL, TransferResponse, signTransfer, type Transfer } from '../../src/wallet/transfer-protocol.ts'
import { startTestRelay, startWanNode, waitForPeers } from '../support/network.ts'
import { waitFor, type Api, type TestNode } from '../support/node.ts'
import { settled } from '../support/peers.ts'

interface Summary { currentBalance: number, totalEarned: number, totalSpent: number, transactionCount: number, pendingTransfers: number }
interface Tx { id: string, type: string, amount: number, peerID: string | null, memo: string }

async function summary (api: Api): Promise<Summary> {
  return (await api.get('/v1/app/wallet')).body as Summary
}

async function transactions (api: Api): Promise<Tx[]> {
  return (await api.get('/v1/app/wallet/transactions?limit=500')).body.transactions as Tx[]
}

/** Micro-credits, to compare sums of balances without float noise. */
function micro (credits: number): number {
  return Math.round(credits * 1e6)
}

async function totalMicro (nodes: TestNode[]): Promise<number> {
  let sum = 0
  for (const node of nodes) sum += micro((await summary(node.api)).currentBalance)
  return sum
}

test('three nodes: sends move exactly the amount, both sides record it under one id, and the sum is conserved', async (t) => {
  const relay = await startTestRelay(t)
  const nodes = await Promise.all([startWanNode(t, relay), startWanNode(t, relay), startWanNode(t, relay)])
  const [a, b, c] = nodes
  await Promise.all(nodes.map((n) => waitForPeers(n, nodes.filter((o) => o !== n).map((o) => o.nodeID))))
  assert.equal(await totalMicro(nodes), 300_000_000)

  const sends: Array<[TestNode, TestNode, number, string]> = [[a, b, 1.5, 'lunch'], [b, c, 2.25, ''], [c, a, 0.000001, 'a micro-credit'], [a, c, 33.333333, 'thirds']]
  const ids: string[] = []
  for (const [from, to, amount, memo] of sends) {
    const before = await summary(from.api)
    const res = await from.api.post('/v1/app/wallet/send', { amount, peerID: to.nodeID, memo })
    assert.equal(res.status, 200, JSON.stringify(res.body))
    assert.deepEqual(Object.keys(res.body).sort(), ['amount', 'newBalance', 'peerID', 'transactionID'])
    assert.equal(res.body.amount, amount)
    assert.equal(res.body.peerID, to.nodeID)
    assert.equal(micro(res.body.newBalance), micro(before.currentBalance) - micro(amount), 'debited at once')
    ids.push(res.body.transactionID)
    await settled(nodes)
  }

  assert.equal(micro((await summary(a.api)).currentBalance), 100_000_000 - 1_500_000 + 1 - 33_333_333)
  assert.equal(micro((await summary(b.api)).currentBalance), 100_000_000 + 1_500_000 - 2_250_000)
  assert.equal(micro((await summary(c.api)).currentBalance), 100_000_000 + 2_250_000 - 1 + 33_333_333)
  assert.equal(await totalMicro(nodes), 300_000_000, 'conserved')
  for (const [i, [from, to, amount, memo]] of sends.entries()) {
    const spend = (await transactions(from.api)).filter((tx) => tx.id === ids[i])
    const earn = (await transactions(to.api)).filter((tx) => tx.id === ids[i])
    assert.deepEqual(spend, [{ ...spend[0], type: 'spend', amount, peerID: to.nodeID, memo }])
    assert.deepEqual(earn, [{ ...earn[0], type: 'earn', amount, peerID: from.nodeID, memo }])
  }

  // Above the balance: 402 and nothing changes, on either side.
  const beforeA = await transactions(a.api)
  const beforeB = await transactions(b.api)
  const over = await a.api.post('/v1/app/wallet/send', { amount: 1000, peerID: b.nodeID })
  assert.equal(over.status, 402)
  assert.equal(over.body.error.type, 'insufficient_credits')
  assert.deepEqual(await transactions(a.api), beforeA)
  assert.deepEqual(await transactions(b.api), beforeB)
})

test('200 concurrent sends from one node: no overdraft, every accepted send settled exactly once on both sides', async (t) => {
  const relay = await startTestRelay(t)
  const nodes = await Promise.all([startWanNode(t, relay), startWanNode(t, relay)])
  const [a, b] = nodes
  await waitForPeers(a, [b.nodeID])
  await waitForPeers(b, [a.nodeID])

  const results = await Promise.all(Array.from({ length: 200 }, async (_, i) =>
    await a.api.post('/v1/app/wallet/send', { amount: 0.7, peerID: b.nodeID, memo: `burst ${i}` })))
  const accepted = results.filter((r) => r.status === 200)
  const refused = results.filter((r) => r.status !== 200)
  assert.equal(accepted.length, 142, '100 / 0.7 sends fit')
  assert.ok(refused.every((r) => r.status === 402 && r.body.error.type === 'insufficient_credits'))
  const balances = accepted.map((r) => micro(r.body.newBalance))
  assert.ok(balances.every((m) => m >= 0), 'no answer ever showed a negative balance')
  assert.equal(new Set(balances).size, 142, 'each debit saw the one before it')

  await settled(nodes)
  const acceptedIDs = accepted.map((r) => r.body.transactionID as string).sort()
  const earned = (await transactions(b.api)).filter((tx) => tx.type === 'earn').map((tx) => tx.id).sort()
  const spent = (await transactions(a.api)).filter((tx) => tx.type === 'spend').map((tx) => tx.id).sort()
  assert.deepEqual(spent, acceptedIDs)
  assert.deepEqual(earned, acceptedIDs, 'each accepted send earned once by the payee')
  assert.equal(micro((await summary(a.api)).currentBalance), 100_000_000 - 142 * 700_000)
  assert.equal(micro((await summary(b.api)).totalEarned), 142 * 700_000)
  assert.equal(await totalMicro(nodes), 200_000_000, 'conserved')
})

/** Sends one raw transfer frame from `host` to the node and returns its acks (or throws when the stream is refused). */
async function sendRaw (host: PeerHost, node: TestNode, frame: unknown | Uint8Array): Promise<Array<{ id: string | null, status: string, reason: string | null }>> {
  const stream: Stream = await openStream(host, nodeIDToPeerId(node.nodeID), TRANSFER_PROTOCOL)
  const frames = openFrames(stream, { maxFrameBytes: 1024 * 1024 })
  try {
    if (frame instanceof Uint8Array) await frames.lp.write(frame)
    else await writeMessage(frames, frame)
    await stream.close()
    return (await readMessage(frames, TransferResponse, { timeoutMs: 5_000 })).acks
  } finally {
    stream.abort(new Error('test done'))
  }
}

function transferTo (node: TestNode, from: NodeIdentity, amountMicro: number, extra: Partial<Transfer> = {}): Transfer {
  return { id: randomUUID(), from: from.nodeID, to: node.nodeID, amountMicro, memo: 'raw', createdAt: new Date().toISOString(), ...extra }
}

test('the transfer protocol refuses forged, replayed, negative, non-finite, too precise, oversized and self-crediting transfers', async (t) => {
  const relay = await startTestRelay(t)
  const node = await startWanNode(t, relay)
  // A bare libp2p node of our own, dialing the node directly: WAN is on there, so it is admitted as a WAN peer.
  const mallory = identityFromSeed(generateSeed())
  const alice = identityFromSeed(generateSeed())
  await waitFor(() => node.node.network.relayConnected, { what: 'WAN on at the node' })
  const host = await createPeerHost(mallory)
  t.after(() => host.stop())
  await host.dial(node.node.network.addresses().map((a) => multiaddr(a)))
  const before = await summary(node.api)

  // One honest transfer: applied; the same envelope again is acknowledged as a duplicate and not applied again.
  const honest = signTransfer(mallory, transferTo(node, mallory, 1_000_000))
  assert.deepEqual((await sendRaw(host, node, { transfers: [honest] }))[0], { id: honest.body.id, status: 'applied', reason: null })
  assert.deepEqual((await sendRaw(host, node, { transfers: [honest, honest] })).map((ack) => ack.status), ['duplicate', 'duplicate'])

  const sign = (body: Record<string, unknown>, by: NodeIdentity = mallory): unknown => signEnvelope(by, body, { domain: TRANSFER_DOMAIN })
  const good = transferTo(node, mallory, 1)
  const refusals: Array<[string, unknown]> = [
    ['tampered amount', { ...signTransfer(mallory, transferTo(node, mallory, 1)), body: { ...good, amountMicro: 50_000_000 } }],
    ['signed for another domain', signEnvelope(mallory, good, { domain: '/meshnode/other/1.0.0' })],
    ["another node's transfer, replayed by us", signTransfer(alice, transferTo(node, alice, 5_000_000))],
    ['from claims another node', sign({ ...good, from: alice.nodeID })],
    ['a reused id with other content', sign({ ...good, id: honest.body.id, amountMicro: 2_000_000 })],
    ['addressed to the sender itself', sign({ ...good, to: mallory.nodeID })],
    ['negative', sign({ ...good, amountMicro: -5_000_000 })],
    ['zero', sign({ ...good, amountMicro: 0 })],
    ['too precise (a fraction of a micro-credit)', sign({ ...good, amountMicro: 1.5 })],
    ['oversized', sign({ ...good, amountMicro: MAX_TRANSFER_MICRO + 1 })],
    ['amount as string', sign({ ...good, amountMicro: '5' })],
    ['not a uuid', sign({ ...good, id: 'x' })],
    ['extra field', sign({ ...good, bonus: 1 })],
    ['memo too long', sign({ ...good, memo: 'x'.repeat(257) })],
    ['not an envelope', { hello: 'world' }]
  ]
  const acks = await sendRaw(host, node, { transfers: refusals.map(([, envelope]) => envelope) })
  for (const [i, [what]] of refusals.entries()) assert.equal(acks[i].status, 'refused', `${what}: ${JSON.stringify(acks[i])}`)

  // Non-finite: JSON cannot carry Infinity, but 1e999 parses to it. Written by hand, since it cannot be signed.
  const infinite = JSON.stringify({ transfers: [{ ...(sign(good) as object), body: { ...good, amountMicro: 0 } }] }).replace('"amountMicro":0', '"amountMicro":1e999')
  assert.equal((await sendRaw(host, node, new TextEncoder().encode(infinite)))[0].status, 'refused')

  assert.equal(micro((await summary(node.api)).currentBalance), micro(before.currentBalance) + 1_000_000, 'only the honest transfer counted, once')
  assert.equal((await summary(node.api)).transactionCount, before.transactionCount + 1)

  // Frames that are no batch at all cost the peer its stream (and, as the network rules, its connection).
  // A fresh node for each, since the first one is refused from then on.
  for (const frame of [{ transfers: Array.from({ length: 51 }, () => honest) }, new TextEncoder().encode(JSON.stringify({ transfers: ['x'.repeat(200 * 1024)] }))]) {
    const other = await createPeerHost(identityFromSeed(generateSeed()))
    t.after(() => other.stop())
    await other.dial(node.node.network.addresses().map((a) => multiaddr(a)))
    await assert.rejects(sendRaw(other, node, frame))
  }
  assert.equal(micro((await summary(node.api)).currentBalance), micro(before.currentBalance) + 1_000_000)
})
