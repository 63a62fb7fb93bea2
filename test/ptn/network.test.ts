// A PTN's whole life over the peer network: three nodes and a relay on loopback, each step checked through the API
// on every node involved.
import assert from 'node:assert/strict'
import { existsSync, statSync } from 'node:fs'
import { test } from 'node:test'
import { createInvite, verifyCertificate } from '../../src/ptn/index.ts'
import { waitFor, type Api, type ApiResponse, type TestNode } from '../support/node.ts'
import { startTestRelay, startWanNode, waitForPeers } from '../support/network.ts'
import { caKeyPath, decodeDocument, readCa } from '../support/ptn.ts'

interface View { ptnID: string, name: string, role: string, members: number, status: string }

async function view (api: Api, ptnID: string): Promise<View | undefined> {
  const res = await api.get('/v1/app/ptn')
  assert.equal(res.status, 200)
  return (res.body.memberships as View[]).find(m => m.ptnID === ptnID)
}

function ok (res: ApiResponse): ApiResponse['body'] {
  assert.equal(res.status, 200, JSON.stringify(res.body))
  return res.body
}

/** Waits until `node` sees `peer` advertise a certificate of `ptnID` with `role` in its capability record. */
async function waitForAdvertised (node: TestNode, peer: TestNode, ptnID: string, role: string | null): Promise<void> {
  await waitFor(() => {
    const certs = node.node.network.peer(peer.nodeID)?.record.ptnCertificates ?? []
    const roles = certs.map(c => decodeDocument(c).payload).filter(p => p.ptnID === ptnID).map(p => p.role)
    return role == null ? roles.length === 0 : roles.includes(role)
  }, { what: `${peer.nodeID.slice(0, 8)} to advertise ${role ?? 'no'} certificate of the PTN to ${node.nodeID.slice(0, 8)}` })
}

test('create → invite → join over the network → issue-cert/join-with-cert → promote-admin → the new admin issues → leave → recover', async (t) => {
  const relay = await startTestRelay(t)
  const [a, b, c] = await Promise.all([startWanNode(t, relay), startWanNode(t, relay), startWanNode(t, relay)])
  await Promise.all([waitForPeers(a, [b.nodeID, c.nodeID]), waitForPeers(b, [a.nodeID, c.nodeID]), waitForPeers(c, [a.nodeID, b.nodeID])])

  // create: A is admin and CA.
  const { ptnID } = ok(await a.api.post('/v1/app/ptn/create', { name: 'lab' }))
  assert.deepEqual(await view(a.api, ptnID), { ptnID, name: 'lab', role: 'admin', members: 1, status: 'active' })

  // invite → B joins over the network: A checks the code and issues B a certificate for B's own nodeID.
  const { inviteCode } = ok(await a.api.post('/v1/app/ptn/invite', { ptnID }))
  assert.deepEqual(ok(await b.api.post('/v1/app/ptn/join', { inviteCode })), { ptnID, name: 'lab', role: 'provider', status: 'active' })
  assert.deepEqual(await view(b.api, ptnID), { ptnID, name: 'lab', role: 'provider', members: 2, status: 'active' })
  assert.deepEqual(await view(a.api, ptnID), { ptnID, name: 'lab', role: 'admin', members: 2, status: 'active' })

  // The invite was single-use: C cannot redeem it again; an expired one never leaves C. Nothing changes anywhere.
  const reused = await c.api.post('/v1/app/ptn/join', { inviteCode })
  assert.equal(reused.status, 400)
  assert.equal(reused.body.error.type, 'invalid_request_error')
  assert.equal(reused.body.error.param, 'inviteCode')
  assert.match(reused.body.error.message, /already used/)
  const expired = createInvite(readCa(a.dataDir, ptnID), { ptnName: 'lab', adminNodeID: a.nodeID, now: Date.now() - 2 * 60 * 60_000 })
  const late = await c.api.post('/v1/app/ptn/join', { inviteCode: expired })
  assert.equal(late.status, 400)
  assert.match(late.body.error.message, /expired/)
  assert.equal(await view(c.api, ptnID), undefined)
  assert.equal((await view(a.api, ptnID))?.members, 2)

  // issue-cert → join-with-cert: C joins with the certificate A issued it.
  const issuedForC = ok(await a.api.post('/v1/app/ptn/issue-cert', { ptnID, nodeID: c.nodeID }))
  assert.equal(issuedForC.role, 'provider')
  assert.deepEqual(ok(await c.api.post('/v1/app/ptn/join-with-cert', { certData: issuedForC.certData })), { ptnID, name: 'lab', role: 'provider', status: 'active' })
  assert.deepEqual(await view(c.api, ptnID), { ptnID, name: 'lab', role: 'provider', members: 2, status: 'active' })
  assert.equal((await view(a.api, ptnID))?.members, 3)
  // Members present their certificates to peers, and peers verify them.
  await waitFor(() => a.node.network.peer(c.nodeID)?.ptnIDs.includes(ptnID) === true && a.node.network.peer(b.nodeID)?.ptnIDs.includes(ptnID) === true,
    { what: 'A to see B and C as verified members' })

  // promote-admin: B receives its admin certificate and the CA key over the encrypted stream, and can issue.
  assert.deepEqual(ok(await a.api.post('/v1/app/ptn/promote-admin', { ptnID, nodeID: b.nodeID })), { nodeID: b.nodeID, role: 'admin' })
  assert.deepEqual(await view(b.api, ptnID), { ptnID, name: 'lab', role: 'admin', members: 2, status: 'active' })
  assert.deepEqual(await view(a.api, ptnID), { ptnID, name: 'lab', role: 'admin', members: 3, status: 'active' })
  assert.equal(statSync(caKeyPath(b.dataDir, ptnID)).mode & 0o777, 0o600)
  assert.equal(readCa(b.dataDir, ptnID).nodeID, ptnID)

  const issuedByB = ok(await b.api.post('/v1/app/ptn/issue-cert', { ptnID, nodeID: c.nodeID, role: 'consumer' }))
  const certByB = verifyCertificate(issuedByB.certData, { ptnID, nodeID: c.nodeID })
  assert.equal(certByB.issuerNodeID, b.nodeID)
  assert.equal(certByB.role, 'consumer')
  assert.equal((await view(b.api, ptnID))?.members, 3)

  // leave: C removes its certificate and tells the admins it can reach: A (its issuer) and B (an admin by its record).
  await waitForAdvertised(c, b, ptnID, 'admin')
  assert.deepEqual(ok(await c.api.post('/v1/app/ptn/leave', { ptnID })), { status: 'left', ptnID })
  assert.deepEqual(await view(c.api, ptnID), { ptnID, name: 'lab', role: 'provider', members: 1, status: 'left' })
  assert.equal((await view(a.api, ptnID))?.members, 2)
  assert.equal((await view(b.api, ptnID))?.members, 2)
  await waitForAdvertised(a, c, ptnID, null)
  assert.equal(a.node.network.peer(c.nodeID)?.ptnIDs.includes(ptnID), false, 'C no longer counts as a member')

  // C rejoins with the certificate the new admin issued.
  assert.deepEqual(ok(await c.api.post('/v1/app/ptn/join-with-cert', { certData: issuedByB.certData })), { ptnID, name: 'lab', role: 'consumer', status: 'active' })
  assert.deepEqual(await view(c.api, ptnID), { ptnID, name: 'lab', role: 'consumer', members: 3, status: 'active' })

  // leave again, then recover: C, holding no CA key, asks a reachable admin for a fresh certificate.
  ok(await c.api.post('/v1/app/ptn/leave', { ptnID }))
  assert.equal((await view(b.api, ptnID))?.members, 2)
  assert.deepEqual(ok(await c.api.post('/v1/app/ptn/recover', { ptnID })), { status: 'recovered', ptnID })
  assert.deepEqual(await view(c.api, ptnID), { ptnID, name: 'lab', role: 'consumer', members: 3, status: 'recovered' })
  assert.equal((await view(b.api, ptnID))?.members, 3, 'B, the admin C asked first (its latest issuer), counts C again')
  await waitFor(() => b.node.network.peer(c.nodeID)?.ptnIDs.includes(ptnID) === true, { what: 'B to see C as a member again' })

  // A leaves without force: B holds the CA key too. A's key goes; B is told.
  assert.deepEqual(ok(await a.api.post('/v1/app/ptn/leave', { ptnID })), { status: 'left', ptnID })
  assert.equal((await view(a.api, ptnID))?.status, 'left')
  assert.ok(!existsSync(caKeyPath(a.dataDir, ptnID)))
  assert.equal((await view(b.api, ptnID))?.members, 2)

  // And A recovers through B: B re-issues the role it knows A by, an admin's with the CA key.
  assert.deepEqual(ok(await a.api.post('/v1/app/ptn/recover', { ptnID })), { status: 'recovered', ptnID })
  // A counts itself and B; C it last heard of leaving (C rejoined through B), so A does not count C.
  assert.deepEqual(await view(a.api, ptnID), { ptnID, name: 'lab', role: 'admin', members: 2, status: 'recovered' })
  assert.equal((await view(b.api, ptnID))?.members, 3)
  assert.equal(readCa(a.dataDir, ptnID).nodeID, ptnID)
  ok(await a.api.post('/v1/app/ptn/invite', { ptnID }))
})

test('promote-admin to a node that never joined: the target refuses, 404, and nothing changes on either side', async (t) => {
  const relay = await startTestRelay(t)
  const [a, b] = await Promise.all([startWanNode(t, relay), startWanNode(t, relay)])
  await Promise.all([waitForPeers(a, [b.nodeID]), waitForPeers(b, [a.nodeID])])
  const { ptnID } = ok(await a.api.post('/v1/app/ptn/create', { name: 'lab' }))
  // A issued B a certificate, so A counts B as a member; B never joined with it.
  ok(await a.api.post('/v1/app/ptn/issue-cert', { ptnID, nodeID: b.nodeID }))
  const before = await view(a.api, ptnID)
  const res = await a.api.post('/v1/app/ptn/promote-admin', { ptnID, nodeID: b.nodeID })
  assert.equal(res.status, 404, JSON.stringify(res.body))
  assert.equal(res.body.error.type, 'not_found')
  assert.match(res.body.error.message, /not a member/)
  assert.deepEqual(await view(a.api, ptnID), before)
  assert.equal(await view(b.api, ptnID), undefined)
  assert.ok(!existsSync(caKeyPath(b.dataDir, ptnID)), 'the CA key was not kept by a non-member')

  // One invite code redeemed twice at once by the same node: exactly one certificate comes out of it.
  const { inviteCode } = ok(await a.api.post('/v1/app/ptn/invite', { ptnID }))
  const results = await Promise.all([1, 2].map(async () => await b.api.post('/v1/app/ptn/join', { inviteCode })))
  const [winner, loser] = results[0].status === 200 ? results : [results[1], results[0]]
  assert.deepEqual(winner.body, { ptnID, name: 'lab', role: 'provider', status: 'active' })
  assert.ok([400, 409].includes(loser.status), JSON.stringify(loser.body))
  assert.deepEqual(await view(b.api, ptnID), { ptnID, name: 'lab', role: 'provider', members: 2, status: 'active' })
  assert.equal((await view(a.api, ptnID))?.members, 2)
})
