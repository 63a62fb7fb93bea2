// The certificates that count are remembered once verified, not verified on every look: this node's own set is
// opened again when a membership changes, and every look compares expiry, so a join, a leave or an expiry shows at once.
import assert from 'node:assert/strict'
import { join } from 'node:path'
import { test, type TestContext } from 'node:test'
import { pino } from 'pino'
import { generateSeed, identityFromSeed, type NodeIdentity } from '../../src/identity/index.ts'
import { MAX_ADVERTISED_CERTIFICATES } from '../../src/network/peers/capabilities.ts'
import { openCertificate } from '../../src/ptn/certificates.ts'
import { PtnService, issueCertificate } from '../../src/ptn/index.ts'
import { VerifiedCertificates } from '../../src/ptn/verified-certificates.ts'
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

test('many records of many certificates, more than the texts remembered: each list is verified once, however often it is looked at', () => {
  // A node's own CA issues each node it runs as many certificates as a record carries: more texts in all than are remembered
  const ca = identityFromSeed(generateSeed())
  const HOUR = 60 * 60_000
  let clock = Date.now()
  const nodes = Array.from({ length: 4 }, () => identityFromSeed(generateSeed()).nodeID)
  const lists = nodes.map((nodeID) => Array.from({ length: MAX_ADVERTISED_CERTIFICATES }, (_, i) =>
    issueCertificate(ca, { ptnName: `ptn-${i}`, nodeID, role: 'provider', issuerNodeID: ca.nodeID, now: clock, ttlMs: (i + 1) * HOUR })))
  let opened = 0
  const certificates = new VerifiedCertificates({ maxEntries: 2 * MAX_ADVERTISED_CERTIFICATES, now: () => clock, open: (certData) => { opened++; return openCertificate(certData) } })

  // Every peer listed, again and again, in the same order (what listing the peers does on every routed request)
  for (let look = 0; look < 3; look++) {
    nodes.forEach((nodeID, i) => { assert.deepEqual(certificates.provenPtnIDs(nodeID, lists[i]), [ca.nodeID], `look ${look}`) })
  }
  assert.equal(opened, nodes.length * MAX_ADVERTISED_CERTIFICATES, 'each certificate\'s signature checked once')

  // Expiry is still judged at every look: past the last one's, a list proves nothing, and nothing was opened again
  clock += MAX_ADVERTISED_CERTIFICATES * HOUR
  assert.deepEqual(certificates.provenPtnIDs(nodes[0], lists[0]), [])
  assert.equal(opened, nodes.length * MAX_ADVERTISED_CERTIFICATES)

  // Another node's certificates, or another PTN's, cannot count for what is asked: passed over without a signature check
  const others = Array.from({ length: MAX_ADVERTISED_CERTIFICATES }, () => issueCertificate(ca, { ptnName: 'theirs', nodeID: nodes[1], role: 'admin', issuerNodeID: ca.nodeID }))
  assert.deepEqual(certificates.provenPtnIDs(nodes[0], others), [])
  for (const certData of others) assert.equal(certificates.check(certData, { nodeID: nodes[1], ptnID: nodes[2] }), null)
  assert.equal(opened, nodes.length * MAX_ADVERTISED_CERTIFICATES)
  assert.equal(certificates.check(others[0], { nodeID: nodes[1], ptnID: ca.nodeID })?.role, 'admin', 'one that may count is checked')
  assert.equal(opened, nodes.length * MAX_ADVERTISED_CERTIFICATES + 1)
})
