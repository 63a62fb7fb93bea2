import assert from 'node:assert/strict'
import { test } from 'node:test'
import { generateSeed, identityFromSeed } from '../../src/identity/index.ts'
import { canonicalJson } from '../../src/wire/index.ts'
import { caFromHex, caKeyHex } from '../../src/ptn/ca-keys.ts'
import {
  CERTIFICATE_DOMAIN, InvalidCertificateError, InvalidInviteError, checkCertificate, createInvite, issueCertificate,
  verifyCertificate, verifyInvite, type CertificateRejection, type InviteRejection
} from '../../src/ptn/index.ts'

const ca = identityFromSeed(generateSeed())
const member = identityFromSeed(generateSeed())
const other = identityFromSeed(generateSeed())
const HOUR = 60 * 60_000

function decode (text: string): { payload: Record<string, unknown>, signature: string } {
  return JSON.parse(Buffer.from(text, 'base64url').toString('utf8'))
}
function encode (document: unknown): string {
  return Buffer.from(JSON.stringify(document)).toString('base64url')
}
function rejects (reason: CertificateRejection) {
  return (err: unknown): boolean => {
    assert.ok(err instanceof InvalidCertificateError, String(err))
    assert.equal(err.reason, reason, err.message)
    assert.equal(err.param, 'certData')
    return true
  }
}
function rejectsInvite (reason: InviteRejection) {
  return (err: unknown): boolean => {
    assert.ok(err instanceof InvalidInviteError, String(err))
    assert.equal(err.reason, reason, err.message)
    assert.equal(err.param, 'inviteCode')
    return true
  }
}

const certData = issueCertificate(ca, { ptnName: 'lab', nodeID: member.nodeID, role: 'provider', issuerNodeID: other.nodeID })

test('a certificate is base64url JSON {payload, signature}, signed by the CA over canonical JSON', () => {
  const { payload, signature } = decode(certData)
  assert.deepEqual(Object.keys(payload).sort(), ['expiresAt', 'issuedAt', 'issuerNodeID', 'nodeID', 'ptnID', 'ptnName', 'role'])
  assert.equal(payload.ptnID, ca.nodeID, 'ptnID is the CA public key')
  assert.equal(payload.nodeID, member.nodeID)
  assert.equal(payload.issuerNodeID, other.nodeID)
  assert.ok(Date.parse(payload.expiresAt as string) > Date.now() + 300 * 24 * HOUR, 'valid for a year by default')
  const signed = new TextEncoder().encode(canonicalJson({ domain: CERTIFICATE_DOMAIN, payload }))
  assert.ok(checkCertificate(certData) != null)
  assert.deepEqual(verifyCertificate(certData, { ptnID: ca.nodeID, nodeID: member.nodeID }), payload)
  assert.equal(Buffer.from(signature, 'base64url').length, 64)
  // The signature covers exactly the canonical form: re-signing it by the CA gives a document that verifies too.
  assert.ok(verifyCertificate(encode({ payload, signature: Buffer.from(ca.sign(signed)).toString('base64url') })))
})

test('a tampered certificate is refused: any field changed, or the signature', () => {
  const { payload, signature } = decode(certData)
  for (const change of [{ role: 'admin' }, { nodeID: other.nodeID }, { expiresAt: new Date(Date.now() + 100 * 365 * 24 * HOUR).toISOString() }, { ptnName: 'other' }]) {
    assert.throws(() => verifyCertificate(encode({ payload: { ...payload, ...change }, signature })), rejects('bad_signature'), JSON.stringify(change))
  }
  const flipped = Buffer.from(signature, 'base64url')
  flipped[0] ^= 1
  assert.throws(() => verifyCertificate(encode({ payload, signature: flipped.toString('base64url') })), rejects('bad_signature'))
  assert.equal(checkCertificate(encode({ payload: { ...payload, role: 'admin' }, signature })), null, 'counts for nothing')
})

test('a certificate signed by another key than its ptnID is refused, whatever key the document names', () => {
  const forger = identityFromSeed(generateSeed())
  const forged = issueCertificate(forger, { ptnName: 'lab', nodeID: member.nodeID, role: 'admin', issuerNodeID: forger.nodeID })
  const { payload, signature } = decode(forged)
  // Claims the real PTN, signed by the forger: verification is against ptnID itself.
  assert.throws(() => verifyCertificate(encode({ payload: { ...payload, ptnID: ca.nodeID }, signature })), rejects('bad_signature'))
  // A document carrying its own key is not a certificate at all.
  assert.throws(() => verifyCertificate(encode({ payload, signature, publicKey: forger.nodeID })), rejects('malformed'))
  // The forger's own PTN is a valid PTN, just not this one.
  assert.throws(() => verifyCertificate(forged, { ptnID: ca.nodeID }), rejects('wrong_ptn'))
})

test('a certificate for another node, an expired one and one from the future are refused', () => {
  assert.throws(() => verifyCertificate(certData, { nodeID: other.nodeID }), rejects('wrong_node'))
  const expired = issueCertificate(ca, { ptnName: 'lab', nodeID: member.nodeID, role: 'provider', issuerNodeID: ca.nodeID, now: Date.now() - 2 * HOUR, ttlMs: HOUR })
  assert.throws(() => verifyCertificate(expired, { nodeID: member.nodeID }), rejects('expired'))
  assert.equal(checkCertificate(expired), null)
  assert.equal(verifyCertificate(expired, { allowExpired: true }).nodeID, member.nodeID, 'recover may look at an expired one')
  const future = issueCertificate(ca, { ptnName: 'lab', nodeID: member.nodeID, role: 'provider', issuerNodeID: ca.nodeID, now: Date.now() + HOUR })
  assert.throws(() => verifyCertificate(future), rejects('not_yet_valid'))
})

test('malformed certificates are refused without throwing anything else', () => {
  const { payload, signature } = decode(certData)
  const cases = [
    '', 'not base64url!', 'x'.repeat(5000), Buffer.from('not json').toString('base64url'), encode(null), encode([]),
    encode({ payload }), encode({ signature }), encode({ payload: { ...payload, role: 'root' }, signature }),
    encode({ payload: { ...payload, extra: 1 }, signature }), encode({ payload: { ...payload, ptnID: 'ABC' }, signature }),
    encode({ payload: { ...payload, issuedAt: 5 }, signature }), encode({ payload, signature: 'short' })
  ]
  for (const text of cases) assert.throws(() => verifyCertificate(text), rejects('malformed'), text.slice(0, 60))
})

test('invite codes: signed by the CA, expire, and refuse tampering', () => {
  const code = createInvite(ca, { ptnName: 'lab', adminNodeID: other.nodeID })
  const invite = verifyInvite(code)
  assert.equal(invite.ptnID, ca.nodeID)
  assert.equal(invite.adminNodeID, other.nodeID)
  assert.ok(Math.abs(Date.parse(invite.expiresAt) - (Date.now() + HOUR)) < 60_000, 'expires in one hour')
  assert.notEqual(verifyInvite(createInvite(ca, { ptnName: 'lab', adminNodeID: other.nodeID })).nonce, invite.nonce)

  const { payload, signature } = decode(code)
  assert.throws(() => verifyInvite(encode({ payload: { ...payload, adminNodeID: member.nodeID }, signature })), rejectsInvite('bad_signature'))
  const expired = createInvite(ca, { ptnName: 'lab', adminNodeID: other.nodeID, now: Date.now() - 2 * HOUR })
  assert.throws(() => verifyInvite(expired), rejectsInvite('expired'))
  assert.throws(() => verifyInvite('garbage'), rejectsInvite('malformed'))
  // A certificate is no invite, and an invite no certificate: the signing domains differ.
  assert.throws(() => verifyInvite(certData), rejectsInvite('malformed'))
  assert.throws(() => verifyCertificate(code), rejects('malformed'))
})

test('a CA key is accepted only for its own PTN', () => {
  assert.equal(caFromHex(caKeyHex(ca), ca.nodeID).nodeID, ca.nodeID)
  assert.equal(caFromHex(caKeyHex(ca).toUpperCase(), ca.nodeID).nodeID, ca.nodeID)
  assert.equal(caFromHex(caKeyHex(ca) + ca.nodeID, ca.nodeID).nodeID, ca.nodeID, 'libp2p 64-byte form')
  for (const hex of [caKeyHex(other), 'zz', caKeyHex(ca).slice(2), caKeyHex(ca) + other.nodeID]) {
    assert.throws(() => caFromHex(hex, ca.nodeID), { name: 'CaKeyMismatchError' })
  }
})
