// A node in more PTNs than a capability record carries certificates for. Before, a 33rd membership
// made the node's record one that peers refuse: they hung up, sends answered 404 and debited transfers stayed pending.
// Now the record carries the certificates peers need most (MAX_ADVERTISED_CERTIFICATES), and memberships past
// MAX_PTN_MEMBERSHIPS are refused with a 409.
import assert from 'node:assert/strict'
import { test } from 'node:test'
import { MAX_ADVERTISED_CERTIFICATES } from '../../src/network/index.ts'
import { MAX_PTN_MEMBERSHIPS, certificatesByUse } from '../../src/ptn/index.ts'
import { startTestNode, waitFor, type Api, type ApiResponse } from '../support/node.ts'
import { startTestRelay, startWanNode, waitForPeers } from '../support/network.ts'
import { decodeDocument } from '../support/ptn.ts'

function ok (res: ApiResponse): ApiResponse['body'] {
  assert.equal(res.status, 200, JSON.stringify(res.body))
  return res.body
}

async function createPtns (api: Api, count: number, prefix: string): Promise<string[]> {
  const ptnIDs: string[] = []
  for (let i = 0; i < count; i++) ptnIDs.push(ok(await api.post('/v1/app/ptn/create', { name: `${prefix}-${i}` })).ptnID)
  return ptnIDs
}

async function balance (api: Api): Promise<{ currentBalance: number, pendingTransfers: number }> {
  return ok(await api.get('/v1/app/wallet'))
}

test('certificatesByUse: all in join order when they fit; else the PTNs connected peers share first, then the newest', () => {
  const own = ['p0', 'p1', 'p2', 'p3', 'p4'].map((ptnID) => ({ ptnID, certData: `cert-${ptnID}` }))
  const peers = [{ ptnIDs: ['p1', 'other'] }, { ptnIDs: ['p1', 'p0'] }, { ptnIDs: [] }]
  assert.deepEqual(certificatesByUse(own, peers, 5), ['cert-p0', 'cert-p1', 'cert-p2', 'cert-p3', 'cert-p4'], 'a record that fits all does not churn with peers')
  assert.deepEqual(certificatesByUse(own, peers, 3), ['cert-p1', 'cert-p0', 'cert-p4'])
  assert.deepEqual(certificatesByUse(own, [], 2), ['cert-p4', 'cert-p3'])
  assert.deepEqual(certificatesByUse([], peers, 2), [])
})

test('40 PTNs on one node: it stays connected to its peers and can send credits; a peer sharing its oldest and newest PTNs sees it as a member of both', async (t) => {
  assert.ok(MAX_ADVERTISED_CERTIFICATES < 40 && 40 <= MAX_PTN_MEMBERSHIPS, 'the test spans the record limit')
  const relay = await startTestRelay(t)
  const [a, b] = await Promise.all([startWanNode(t, relay), startWanNode(t, relay)])
  await Promise.all([waitForPeers(a, [b.nodeID]), waitForPeers(b, [a.nodeID])])

  const ptnIDs = await createPtns(a.api, 40, 'team')
  assert.equal((ok(await a.api.get('/v1/app/ptn')).memberships as unknown[]).length, 40)

  // B joins A's oldest and newest PTNs: whichever end a record cut by join order kept, it would drop one of them.
  const [oldest, newest] = [ptnIDs[0], ptnIDs[39]]
  for (const ptnID of [oldest, newest]) {
    const { certData } = ok(await a.api.post('/v1/app/ptn/issue-cert', { ptnID, nodeID: b.nodeID }))
    ok(await b.api.post('/v1/app/ptn/join-with-cert', { certData }))
  }

  // A's record is one B accepts (as many certificates as a record carries), and it proves A's membership of both PTNs
  // B shares with it: A ranks first the PTNs its connected peers are in.
  await waitFor(() => {
    const peer = b.node.network.peer(a.nodeID)
    return peer != null && peer.record.ptnCertificates.length === MAX_ADVERTISED_CERTIFICATES && peer.ptnIDs.includes(oldest) && peer.ptnIDs.includes(newest)
  }, { what: 'B to hold a full record of A that proves A a member of the PTNs they share' })
  const advertised = b.node.network.peer(a.nodeID)?.record.ptnCertificates.map((cert) => decodeDocument(cert).payload.ptnID) ?? []
  assert.deepEqual(advertised.slice(0, 2).sort(), [newest, oldest].sort(), 'the shared PTNs come first')
  assert.deepEqual(advertised.slice(2), ptnIDs.slice(1, 39).reverse().slice(0, MAX_ADVERTISED_CERTIFICATES - 2), 'then the newest joined')
  // And A sees B as a member: B's reserved slots and PTN-scoped routing count A, and A's count B.
  await waitFor(() => [oldest, newest].every((ptnID) => a.node.network.peer(b.nodeID)?.ptnIDs.includes(ptnID) === true), { what: 'A to see B as a member of both PTNs' })

  // Still connected both ways, nobody banned, and credits go both ways and are acknowledged.
  assert.equal(a.node.network.isBanned(b.nodeID), false)
  assert.equal(b.node.network.isBanned(a.nodeID), false)
  const peersOfB = ok(await b.api.get('/v1/app/peers')).peers as Array<{ nodeID: string }>
  assert.ok(peersOfB.some((peer) => peer.nodeID === a.nodeID), 'A is in B\'s peer list')
  const sent = ok(await a.api.post('/v1/app/wallet/send', { peerID: b.nodeID, amount: 2.5, memo: 'from a node in 40 PTNs' }))
  assert.equal(sent.newBalance, 97.5)
  await waitFor(async () => (await balance(b.api)).currentBalance === 102.5, { what: 'B to be credited' })
  await waitFor(async () => (await balance(a.api)).pendingTransfers === 0, { what: 'A\'s transfer acknowledged' })
  ok(await b.api.post('/v1/app/wallet/send', { peerID: a.nodeID, amount: 1 }))
  await waitFor(async () => (await balance(a.api)).currentBalance === 98.5, { what: 'A to be credited' })
  assert.deepEqual(ok(await a.api.get('/v1/app/wallet/pending')), { transfers: [] })
})

test(`at ${MAX_PTN_MEMBERSHIPS} memberships create, join-with-cert and recover answer 409 and change nothing; leaving one makes room`, async (t) => {
  const [node, other] = await Promise.all([startTestNode(t), startTestNode(t)])
  const ptnIDs = await createPtns(node.api, MAX_PTN_MEMBERSHIPS, 'full')
  const before = ok(await node.api.get('/v1/app/ptn'))
  assert.equal(before.memberships.length, MAX_PTN_MEMBERSHIPS)

  const assertFull = (res: ApiResponse): void => {
    assert.equal(res.status, 409, JSON.stringify(res.body))
    assert.equal(res.body.error.type, 'conflict')
    assert.match(res.body.error.message, new RegExp(`already in ${MAX_PTN_MEMBERSHIPS} PTNs.*leave one`))
  }
  assertFull(await node.api.post('/v1/app/ptn/create', { name: 'one too many' }))
  // A certificate of another node's PTN, issued to this node: valid, and still one membership too many.
  const { ptnID: foreign } = ok(await other.api.post('/v1/app/ptn/create', { name: 'elsewhere' }))
  const { certData } = ok(await other.api.post('/v1/app/ptn/issue-cert', { ptnID: foreign, nodeID: node.nodeID }))
  assertFull(await node.api.post('/v1/app/ptn/join-with-cert', { certData }))
  assert.deepEqual(ok(await node.api.get('/v1/app/ptn')), before, 'nothing changed')

  // Leave one (this node holds its only CA key: force), then recovering it is one too many again only once full.
  ok(await node.api.post('/v1/app/ptn/leave', { ptnID: ptnIDs[1], force: true }))
  ok(await node.api.post('/v1/app/ptn/join-with-cert', { certData }))
  ok(await node.api.post('/v1/app/ptn/leave', { ptnID: foreign }))
  ok(await node.api.post('/v1/app/ptn/create', { name: 'fills the place again' }))
  const left = await node.api.post('/v1/app/ptn/recover', { ptnID: foreign })
  assertFull(left)
  assert.equal((ok(await node.api.get('/v1/app/ptn')).memberships as Array<{ ptnID: string, status: string }>).find((m) => m.ptnID === foreign)?.status, 'left')
})
