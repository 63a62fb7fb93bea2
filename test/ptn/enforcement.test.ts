// Peers present certificates in their capability records; a request naming a PTN runs only locally
// or on verified members; org_capacity_reservation keeps slots for members; expired or forged certificates count for
// nothing.
import assert from 'node:assert/strict'
import { join } from 'node:path'
import { test } from 'node:test'
import { pino } from 'pino'
import { generateSeed, identityFromSeed } from '../../src/identity/index.ts'
import { PtnService, issueCertificate } from '../../src/ptn/index.ts'
import { openDatabase } from '../../src/store/index.ts'
import { TINY_MODEL_ID, startChatNode } from '../support/chat-node.ts'
import { FAST_NETWORK, startTestRelay, startWanNode, waitForPeers, wanSettings } from '../support/network.ts'
import { tempDir, waitFor, type TestNode } from '../support/node.ts'
import { metric } from '../support/peers.ts'
import { decodeDocument, encodeDocument } from '../support/ptn.ts'

const HOUR = 60 * 60_000
const messages = [{ role: 'user', content: 'Tell me a story.' }]

async function chat (node: TestNode, headers: Record<string, string> = {}, extra: Record<string, unknown> = {}): Promise<{ status: number, servedBy: string | null, body: any }> { // eslint-disable-line @typescript-eslint/no-explicit-any
  const res = await node.api.post('/v1/chat/completions', { model: TINY_MODEL_ID, messages, max_tokens: 3, ...extra }, headers)
  return { status: res.status, servedBy: res.headers.get('x-served-by'), body: res.body }
}

test('a PTN-scoped chat request never reaches a non-member, even the only peer with the model; a member serves it', async (t) => {
  const relay = await startTestRelay(t)
  const provider = await startChatNode(t, { network: FAST_NETWORK })
  assert.equal((await provider.api.patch('/v1/app/settings', wanSettings(relay))).status, 200)
  const requester = await startWanNode(t, relay)
  await Promise.all([waitForPeers(requester, [provider.nodeID]), waitForPeers(provider, [requester.nodeID])])
  await waitFor(() => requester.node.network.peer(provider.nodeID)?.record.models.loaded === TINY_MODEL_ID, { what: 'the provider to advertise its model' })

  // Control: unscoped, the request goes to the provider, the only peer with the model.
  const open = await chat(requester)
  assert.equal(open.status, 200, JSON.stringify(open.body))
  assert.equal(open.servedBy, `peer:${provider.nodeID}`)
  assert.equal(await metric(provider.api, 'meshnode_peer_requests_served_total'), 1)

  // The requester's own PTN, of which the provider is no member: scoped requests find no one and reach no one.
  const { body: { ptnID } } = await requester.api.post('/v1/app/ptn/create', { name: 'lab' })
  for (const scoped of [await chat(requester, { 'x-ptn-id': ptnID }), await chat(requester, {}, { ptn: ptnID })]) {
    assert.equal(scoped.status, 503, JSON.stringify(scoped.body))
    assert.equal(scoped.body.error.type, 'service_unavailable')
    assert.match(scoped.body.error.message, new RegExp(`no member of PTN ${ptnID}`))
  }
  assert.equal(await metric(provider.api, 'meshnode_peer_requests_served_total'), 1, 'the non-member was never asked')

  // org_capacity_reservation 1: every slot of the provider is kept for members of its PTNs; the requester is none yet.
  assert.equal((await provider.api.patch('/v1/app/settings', { org_capacity_reservation: 1 })).status, 200)
  const refused = await chat(requester)
  assert.notEqual(refused.status, 200)
  assert.equal(await metric(provider.api, 'meshnode_peer_requests_served_total'), 1)

  // The provider joins the PTN: now it is a verified member for the requester, and the requester one for it.
  const { body: { certData } } = await requester.api.post('/v1/app/ptn/issue-cert', { ptnID, nodeID: provider.nodeID })
  assert.equal((await provider.api.post('/v1/app/ptn/join-with-cert', { certData })).status, 200)
  await waitFor(() => requester.node.network.peer(provider.nodeID)?.ptnIDs.includes(ptnID) === true, { what: 'the provider to present its certificate' })
  const member = await chat(requester, { 'x-ptn-id': ptnID })
  assert.equal(member.status, 200, JSON.stringify(member.body))
  assert.equal(member.servedBy, `peer:${provider.nodeID}`)
  const reserved = await chat(requester)
  assert.equal(reserved.status, 200, 'a member may use the reserved slots')
  assert.equal(await metric(provider.api, 'meshnode_peer_requests_served_total'), 3)
})

test('expired, forged and foreign certificates count for nothing; only valid own certificates are advertised', async (t) => {
  const dir = await tempDir(t)
  const db = openDatabase(join(dir, 'meshnode.db'))
  t.after(() => { db.close() })
  const identity = identityFromSeed(generateSeed())
  // The services' clock, moved by the test: a certificate expires when the test says, not after real time passes.
  let clock = Date.now()
  const now = (): number => clock
  const ptn = new PtnService({ db, identity, peers: null, log: pino({ level: 'silent' }) }, { dir: join(dir, 'ptn'), certificateTtlMs: HOUR, now })
  const { ptnID } = ptn.create('lab')
  assert.equal(ptn.certificatesForAdvert().length, 1)
  assert.deepEqual(ptn.memberPtnIDs(), [ptnID])

  const peer = identityFromSeed(generateSeed()).nodeID
  const { certData } = ptn.issueCertificate(ptnID, peer, 'consumer')
  assert.deepEqual(ptn.verifiedPtnIDs(peer, [certData]), [ptnID])
  assert.deepEqual(ptn.verifyMemberCertificate(certData, peer, ptnID), { ptnID, role: 'consumer' })

  const { payload, signature } = decodeDocument(certData)
  const ca = identityFromSeed(generateSeed())
  const forged = issueCertificate(ca, { ptnName: 'lab', nodeID: peer, role: 'admin', issuerNodeID: ca.nodeID })
  const invalid = [
    encodeDocument({ payload: { ...payload, role: 'admin' }, signature }),                              // tampered
    encodeDocument({ ...decodeDocument(forged), payload: { ...decodeDocument(forged).payload, ptnID } }), // another key claiming the PTN
    ptn.issueCertificate(ptnID, identityFromSeed(generateSeed()).nodeID).certData,                       // another node's
    'garbage'
  ]
  assert.deepEqual(ptn.verifiedPtnIDs(peer, invalid), [])
  for (const cert of invalid) assert.equal(ptn.verifyMemberCertificate(cert, peer, ptnID), null)
  assert.equal(ptn.verifyMemberCertificate(certData, peer, ca.nodeID), null, 'valid, but of another PTN')

  // An expired certificate, whether a peer's or this node's own, counts for nothing and is not advertised.
  const expiring = new PtnService({ db, identity, peers: null, log: pino({ level: 'silent' }) }, { dir: join(dir, 'ptn'), certificateTtlMs: 200, now })
  const expired = expiring.issueCertificate(ptnID, peer).certData
  assert.deepEqual(ptn.verifiedPtnIDs(peer, [expired]), [ptnID], 'valid until it expires')
  clock = Date.parse(decodeDocument(expired).payload.expiresAt)   // valid before expiresAt, not at it
  assert.deepEqual(ptn.verifiedPtnIDs(peer, [expired]), [])
  assert.equal((await expiring.recover(ptnID)).status, 'recovered')   // this node's own certificate, now valid for 200 ms
  const advertised = expiring.certificatesForAdvert()
  assert.equal(advertised.length, 1, 'advertised while valid')
  assert.deepEqual(expiring.memberPtnIDs(), [ptnID])
  clock = Date.parse(decodeDocument(advertised[0]).payload.expiresAt)
  assert.deepEqual(expiring.certificatesForAdvert(), [])
  assert.deepEqual(expiring.memberPtnIDs(), [])
  assert.equal((await ptn.recover(ptnID)).status, 'recovered', 'recover re-signs it with the CA key')
  assert.deepEqual(ptn.memberPtnIDs(), [ptnID])
})
