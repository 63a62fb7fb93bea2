// The certificates that count are remembered once verified, not verified on every look: this node's own set is
// opened again when a membership changes, and every look compares expiry, so a join, a leave or an expiry shows at once.
import assert from 'node:assert/strict'
import { join } from 'node:path'
import { test, type TestContext } from 'node:test'
import { pino } from 'pino'
import { generateSeed, identityFromSeed, type NodeIdentity } from '../../src/identity/index.ts'
import { PtnService, issueCertificate } from '../../src/ptn/index.ts'
import { openDatabase } from '../../src/store/index.ts'
import { tempDir, waitFor } from '../support/node.ts'
import { decodeDocument, encodeDocument } from '../support/ptn.ts'

/** Long enough for the synchronous steps between issuing and the first look; short enough to wait for. */
const SHORT_TTL_MS = 2_000

async function startService (t: TestContext): Promise<{ ptn: PtnService, identity: NodeIdentity }> {
  const dir = await tempDir(t)
  const db = openDatabase(join(dir, 'meshnode.db'))
  t.after(() => { db.close() })
  const identity = identityFromSeed(generateSeed())
  return { ptn: new PtnService({ db, identity, peers: null, log: pino({ level: 'silent' }) }, { dir: join(dir, 'ptn') }), identity }
}

function expiresAt (certData: string): number {
  return Date.parse(decodeDocument(certData).payload.expiresAt)
}

test('this node\'s certificates: a join, a leave and an expiry each change what counts, after the set was looked at', async (t) => {
  const { ptn, identity } = await startService(t)
  const ca = identityFromSeed(generateSeed())
  const ptnID = ca.nodeID
  const certData = issueCertificate(ca, { ptnName: 'lab', nodeID: identity.nodeID, role: 'provider', issuerNodeID: ca.nodeID })
  assert.deepEqual(ptn.memberPtnIDs(), [])
  assert.deepEqual(ptn.certificatesForAdvert(), [])

  ptn.joinWithCertificate(certData)
  assert.deepEqual(ptn.memberPtnIDs(), [ptnID], 'joined')
  assert.deepEqual(ptn.certificatesForAdvert(), [certData])

  const created = ptn.create('own').ptnID
  assert.deepEqual(ptn.memberPtnIDs(), [ptnID, created], 'created, oldest joined first')

  await ptn.leave(ptnID)
  assert.deepEqual(ptn.memberPtnIDs(), [created], 'left')
  assert.equal(ptn.certificatesForAdvert().length, 1)

  const shortLived = issueCertificate(ca, { ptnName: 'lab', nodeID: identity.nodeID, role: 'provider', issuerNodeID: ca.nodeID, ttlMs: SHORT_TTL_MS })
  ptn.joinWithCertificate(shortLived)
  assert.deepEqual(ptn.memberPtnIDs(), [created, ptnID], 'joined again, with a certificate about to expire')
  assert.ok(ptn.certificatesForAdvert().includes(shortLived))
  await waitFor(() => Date.now() >= expiresAt(shortLived), { what: 'the short-lived certificate to expire' })
  assert.deepEqual(ptn.memberPtnIDs(), [created], 'expired: no write happened, and it stopped counting')
  assert.ok(!ptn.certificatesForAdvert().includes(shortLived))
  assert.equal(ptn.countInEffect(), 2, 'the membership is still in effect; only its certificate no longer counts')
})

test('a peer\'s certificate: checked again on every look for its node, PTN and expiry; a forgery stays one', async (t) => {
  const { ptn } = await startService(t)
  const { ptnID } = ptn.create('lab')
  const peer = identityFromSeed(generateSeed()).nodeID
  const other = identityFromSeed(generateSeed()).nodeID
  const { certData } = ptn.issueCertificate(ptnID, peer, 'consumer')
  const ca = identityFromSeed(generateSeed())
  const shortLived = issueCertificate(ca, { ptnName: 'brief', nodeID: peer, role: 'provider', issuerNodeID: ca.nodeID, ttlMs: SHORT_TTL_MS })
  const { payload, signature } = decodeDocument(certData)
  const forged = encodeDocument({ payload: { ...payload, role: 'admin' }, signature })

  for (let look = 0; look < 2; look++) {
    assert.deepEqual(ptn.verifiedPtnIDs(peer, [certData, shortLived, forged]).sort(), [ptnID, ca.nodeID].sort(), `look ${look}`)
    assert.deepEqual(ptn.verifiedPtnIDs(other, [certData, shortLived]), [], 'another node\'s certificates prove nothing')
    assert.equal(ptn.verifyMemberCertificate(certData, peer, ca.nodeID), null, 'valid, but of another PTN')
    assert.deepEqual(ptn.verifyMemberCertificate(certData, peer, ptnID), { ptnID, role: 'consumer' })
  }
  await waitFor(() => Date.now() >= expiresAt(shortLived), { what: 'the short-lived certificate to expire' })
  assert.deepEqual(ptn.verifiedPtnIDs(peer, [certData, shortLived, forged]), [ptnID], 'the expired one stopped counting')
})
