// The PTN endpoints on one or two nodes without a peer network: every step that needs only this node, and every bad
// input, asserting the envelope and that nothing changed.
import assert from 'node:assert/strict'
import { existsSync, statSync } from 'node:fs'
import { readFile } from 'node:fs/promises'
import { dirname, join } from 'node:path'
import { PassThrough } from 'node:stream'
import { test } from 'node:test'
import { defaultConfig } from '../../src/config.ts'
import { generateSeed, identityFromSeed } from '../../src/identity/index.ts'
import { startNode } from '../../src/node.ts'
import { createInvite, issueCertificate } from '../../src/ptn/index.ts'
import { Api, startTestNode, tempDir, type ApiResponse } from '../support/node.ts'
import { caKeyPath, decodeDocument, encodeDocument, readCa, readCaKeyHex } from '../support/ptn.ts'

const HOUR = 60 * 60_000
const UNKNOWN_PTN = 'ab'.repeat(32)

function assertError (res: ApiResponse, status: number, type: string, param?: string | null): void {
  assert.equal(res.status, status, JSON.stringify(res.body))
  assert.equal(res.body.error.type, type, res.body.error.message)
  if (param !== undefined) assert.equal(res.body.error.param, param, res.body.error.message)
}

async function memberships (api: Api): Promise<unknown> {
  const res = await api.get('/v1/app/ptn')
  assert.equal(res.status, 200)
  return res.body
}

test('create: the creator is admin and CA; the key is stored 0600 and never answered or logged', async (t) => {
  const dataDir = await tempDir(t)
  const logs = new PassThrough()
  let logText = ''
  logs.on('data', (chunk: Buffer) => { logText += chunk.toString() })
  const node = await startNode(defaultConfig({ port: 0, dataDir, logLevel: 'debug', threads: 1 }), { logDestination: logs })
  t.after(() => node.close())
  const api = new Api(node.url)

  assert.deepEqual(await memberships(api), { memberships: [] })
  const created = await api.post('/v1/app/ptn/create', { name: '  research lab ' })
  assert.equal(created.status, 200)
  assert.deepEqual(Object.keys(created.body).sort(), ['name', 'ptnID', 'role'])
  assert.match(created.body.ptnID, /^[0-9a-f]{64}$/)
  assert.equal(created.body.name, 'research lab')
  assert.equal(created.body.role, 'admin')
  const { ptnID } = created.body

  assert.deepEqual(await memberships(api), { memberships: [{ ptnID, name: 'research lab', role: 'admin', members: 1, status: 'active' }] })
  assert.equal((await api.get('/v1/app')).body.ptn.memberships, 1)

  const keyFile = caKeyPath(dataDir, ptnID)
  assert.equal(statSync(keyFile).mode & 0o777, 0o600)
  assert.equal(statSync(dirname(keyFile)).mode & 0o777, 0o700)
  const ca = readCa(dataDir, ptnID)
  assert.equal(ca.nodeID, ptnID, 'ptnID is the hex CA public key')

  // Every other step an admin takes, then a look for the key anywhere it must not be.
  const answers = [
    created,
    await api.get('/v1/app/ptn'),
    await api.get('/v1/app'),
    await api.post('/v1/app/ptn/invite', { ptnID }),
    await api.post('/v1/app/ptn/issue-cert', { ptnID, nodeID: identityFromSeed(generateSeed()).nodeID }),
    await api.post('/v1/app/ptn/import-ca-key', { ptnID, caKeyHex: readCaKeyHex(dataDir, ptnID) }),
    await api.post('/v1/app/ptn/recover', { ptnID })
  ]
  const keyHex = readCaKeyHex(dataDir, ptnID)
  const wrongKeyHex = Buffer.from(generateSeed()).toString('hex')
  assert.equal((await api.post('/v1/app/ptn/import-ca-key', { ptnID, caKeyHex: wrongKeyHex })).status, 400)
  for (const res of answers) {
    assert.equal(res.status, 200, JSON.stringify(res.body))
    assert.ok(!JSON.stringify(res.body).includes(keyHex), 'no answer holds the CA key')
  }
  await node.close()
  assert.ok(logText.includes('PTN created'), 'the log is being captured')
  assert.ok(!logText.includes(keyHex), 'no log line holds the CA key')
  assert.ok(!logText.includes(wrongKeyHex), 'nor a key refused on import')
  for (const file of ['meshnode.db', 'meshnode.db-wal']) {
    const bytes = await readFile(join(dataDir, file)).catch(() => Buffer.alloc(0))
    assert.ok(!bytes.includes(Buffer.from(keyHex)), `${file} does not hold the CA key`)
  }
})

test('create refuses a missing, empty, wrong-typed or overlong name; two creates make two PTNs', async (t) => {
  const { api } = await startTestNode(t)
  for (const body of [{}, { name: '' }, { name: '   ' }, { name: 7 }, { name: null }, { name: 'x'.repeat(129) }]) {
    assertError(await api.post('/v1/app/ptn/create', body), 400, 'invalid_request_error', 'name')
  }
  assertError(await api.send('POST', '/v1/app/ptn/create', '{"name":', { 'content-type': 'application/json' }), 400, 'invalid_request_error')
  assert.deepEqual(await memberships(api), { memberships: [] })

  const [a, b] = await Promise.all([api.post('/v1/app/ptn/create', { name: 'lab' }), api.post('/v1/app/ptn/create', { name: 'lab' })])
  assert.equal(a.status, 200)
  assert.equal(b.status, 200)
  assert.notEqual(a.body.ptnID, b.body.ptnID)
  assert.equal((await api.get('/v1/app/ptn')).body.memberships.length, 2)
})

test('invite and issue-cert: admins only, role honoured and defaulting to provider, aliases accepted, bad input refused', async (t) => {
  const [admin, member] = await Promise.all([startTestNode(t), startTestNode(t)])
  const { body: { ptnID } } = await admin.api.post('/v1/app/ptn/create', { name: 'lab' })

  const invite = await admin.api.post('/v1/app/ptn/invite', { ptn_id: ptnID })
  assert.equal(invite.status, 200)
  assert.deepEqual(Object.keys(invite.body), ['inviteCode'])
  const { payload } = decodeDocument(invite.body.inviteCode)
  assert.equal(payload.ptnID, ptnID)
  assert.equal(payload.adminNodeID, admin.nodeID)

  const issued = await admin.api.post('/v1/app/ptn/issue-cert', { ptnID, nodeID: member.nodeID })
  assert.equal(issued.status, 200)
  assert.deepEqual(Object.keys(issued.body).sort(), ['certData', 'nodeID', 'role'])
  assert.equal(issued.body.role, 'provider')
  assert.equal(issued.body.nodeID, member.nodeID)
  const cert = decodeDocument(issued.body.certData).payload
  assert.deepEqual({ ptnID: cert.ptnID, ptnName: cert.ptnName, nodeID: cert.nodeID, role: cert.role, issuerNodeID: cert.issuerNodeID },
    { ptnID, ptnName: 'lab', nodeID: member.nodeID, role: 'provider', issuerNodeID: admin.nodeID })
  for (const role of ['consumer', 'admin', 'provider'] as const) {
    const res = await admin.api.post('/v1/app/ptn/issue-cert', { ptn_id: ptnID.toUpperCase(), node_id: member.nodeID, role })
    assert.equal(res.status, 200)
    assert.equal(res.body.role, role)
    assert.equal(decodeDocument(res.body.certData).payload.role, role)
  }
  assert.equal((await admin.api.get('/v1/app/ptn')).body.memberships[0].members, 2, 'the admin knows the node it issued a certificate to')

  const before = await memberships(admin.api)
  for (const [body, param] of [
    [{}, 'ptnID'], [{ ptnID: 5 }, 'ptnID'], [{ ptnID: 'lab' }, 'ptnID'], [{ ptnID: ptnID.slice(2) }, 'ptnID']
  ] as const) {
    assertError(await admin.api.post('/v1/app/ptn/invite', body), 400, 'invalid_request_error', param)
  }
  for (const [body, param] of [
    [{ nodeID: member.nodeID }, 'ptnID'], [{ ptnID }, 'nodeID'], [{ ptnID, nodeID: 'node-b' }, 'nodeID'],
    [{ ptnID, nodeID: member.nodeID, role: 'root' }, 'role'], [{ ptnID, nodeID: member.nodeID, role: 1 }, 'role']
  ] as const) {
    assertError(await admin.api.post('/v1/app/ptn/issue-cert', body), 400, 'invalid_request_error', param)
  }
  const unknownInvite = await admin.api.post('/v1/app/ptn/invite', { ptnID: UNKNOWN_PTN })
  assertError(unknownInvite, 404, 'not_found')
  assert.match(unknownInvite.body.error.message, new RegExp(UNKNOWN_PTN))
  assertError(await admin.api.post('/v1/app/ptn/issue-cert', { ptnID: UNKNOWN_PTN, nodeID: member.nodeID }), 404, 'not_found')
  assert.deepEqual(await memberships(admin.api), before)

  // A provider is a member but no admin.
  assert.equal((await member.api.post('/v1/app/ptn/join-with-cert', { certData: issued.body.certData })).status, 200)
  assertError(await member.api.post('/v1/app/ptn/invite', { ptnID }), 403, 'permission_error')
  assertError(await member.api.post('/v1/app/ptn/issue-cert', { ptnID, nodeID: admin.nodeID }), 403, 'permission_error')
})

test('join-with-cert: valid certificate → active with its role; tampered, foreign, expired or malformed → 400 and no change', async (t) => {
  const [admin, member] = await Promise.all([startTestNode(t), startTestNode(t)])
  const { body: { ptnID } } = await admin.api.post('/v1/app/ptn/create', { name: 'lab' })
  const { body: { certData } } = await admin.api.post('/v1/app/ptn/issue-cert', { ptnID, nodeID: member.nodeID, role: 'consumer' })
  const { body: { certData: foreignCert } } = await admin.api.post('/v1/app/ptn/issue-cert', { ptnID, nodeID: admin.nodeID })
  const { payload, signature } = decodeDocument(certData)
  const ca = readCa(admin.dataDir, ptnID)
  const forger = identityFromSeed(generateSeed())
  const forged = decodeDocument(issueCertificate(forger, { ptnName: 'lab', nodeID: member.nodeID, role: 'admin', issuerNodeID: forger.nodeID }))

  const cases: Array<[string, unknown, string]> = [
    ['tampered role', { certData: encodeDocument({ payload: { ...payload, role: 'admin' }, signature }) }, 'signature'],
    ['tampered expiry', { certData: encodeDocument({ payload: { ...payload, expiresAt: new Date(Date.now() + 1e12).toISOString() }, signature }) }, 'signature'],
    ['for another node', { certData: foreignCert }, 'issued to node'],
    ['expired', { certData: issueCertificate(ca, { ptnName: 'lab', nodeID: member.nodeID, role: 'provider', issuerNodeID: admin.nodeID, now: Date.now() - 2 * HOUR, ttlMs: HOUR }) }, 'expired'],
    ['signed by another CA claiming this PTN', { certData: encodeDocument({ ...forged, payload: { ...forged.payload, ptnID } }) }, 'signature'],
    ['malformed', { certData: 'hello' }, 'not a meshnode PTN certificate'],
    ['an invite code', { certData: createInvite(ca, { ptnName: 'lab', adminNodeID: admin.nodeID }) }, 'not a meshnode PTN certificate'],
    ['missing', {}, ''],
    ['wrong type', { certData: 42 }, ''],
    ['empty', { certData: '' }, '']
  ]
  for (const [what, body, message] of cases) {
    const res = await member.api.post('/v1/app/ptn/join-with-cert', body)
    assertError(res, 400, 'invalid_request_error', 'certData')
    assert.match(res.body.error.message, new RegExp(message), what)
  }
  assert.deepEqual(await memberships(member.api), { memberships: [] })
  assert.equal((await member.api.get('/v1/app')).body.ptn.memberships, 0)

  // Concurrent joins with the same certificate: one wins, the other finds the membership active.
  const results = await Promise.all([1, 2].map(() => member.api.post('/v1/app/ptn/join-with-cert', { cert_data: certData })))
  const statuses = results.map(r => r.status).sort()
  assert.deepEqual(statuses, [200, 409])
  const joined = results.find(r => r.status === 200) as ApiResponse
  assert.deepEqual(joined.body, { ptnID, name: 'lab', role: 'consumer', status: 'active' })
  assertError(results.find(r => r.status === 409) as ApiResponse, 409, 'conflict')
  const after = await memberships(member.api)
  assert.deepEqual(after, { memberships: [{ ptnID, name: 'lab', role: 'consumer', members: 2, status: 'active' }] })
  assertError(await member.api.post('/v1/app/ptn/join-with-cert', { certData }), 409, 'conflict')
  assert.deepEqual(await memberships(member.api), after)
})

test('join by invite: bad, expired or tampered codes → 400; a member → 409; an unreachable admin → 503; nothing changes', async (t) => {
  const [admin, joiner] = await Promise.all([startTestNode(t), startTestNode(t)])
  const { body: { ptnID } } = await admin.api.post('/v1/app/ptn/create', { name: 'lab' })
  const { body: { inviteCode } } = await admin.api.post('/v1/app/ptn/invite', { ptnID })
  const ca = readCa(admin.dataDir, ptnID)
  const { payload, signature } = decodeDocument(inviteCode)

  const cases: Array<[unknown, string]> = [
    [{}, ''], [{ inviteCode: 7 }, ''], [{ inviteCode: '' }, ''], [{ inviteCode: 'x'.repeat(3000) }, ''],
    [{ inviteCode: 'not-an-invite' }, 'not a meshnode PTN invite code'],
    [{ inviteCode: createInvite(ca, { ptnName: 'lab', adminNodeID: admin.nodeID, now: Date.now() - 2 * HOUR }) }, 'expired'],
    [{ inviteCode: encodeDocument({ payload: { ...payload, adminNodeID: joiner.nodeID }, signature }) }, 'signature'],
    [{ inviteCode: encodeDocument({ payload: { ...payload, expiresAt: new Date(Date.now() + 1e12).toISOString() }, signature }) }, 'signature']
  ]
  for (const [body, message] of cases) {
    const res = await joiner.api.post('/v1/app/ptn/join', body)
    assertError(res, 400, 'invalid_request_error', 'inviteCode')
    assert.match(res.body.error.message, new RegExp(message))
  }
  // No peer network is on: the admin cannot be reached.
  const unreachable = await joiner.api.post('/v1/app/ptn/join', { invite_code: inviteCode })
  assertError(unreachable, 503, 'service_unavailable')
  assert.match(unreachable.body.error.message, new RegExp(admin.nodeID))
  assert.deepEqual(await memberships(joiner.api), { memberships: [] })
  assert.equal((await admin.api.get('/v1/app/ptn')).body.memberships[0].members, 1)

  // The admin itself is a member already.
  assertError(await admin.api.post('/v1/app/ptn/join', { inviteCode }), 409, 'conflict')
})

test('leave: the last CA holder must force it; leaving removes certificate and key; again is a no-op', async (t) => {
  const node = await startTestNode(t)
  const { api, dataDir } = node
  const { body: { ptnID } } = await api.post('/v1/app/ptn/create', { name: 'solo' })
  const before = await memberships(api)

  for (const [body, param] of [[{}, 'ptnID'], [{ ptnID: 'x' }, 'ptnID'], [{ ptnID, force: 'yes' }, 'force']] as const) {
    assertError(await api.post('/v1/app/ptn/leave', body), 400, 'invalid_request_error', param)
  }
  assertError(await api.post('/v1/app/ptn/leave', { ptnID: UNKNOWN_PTN }), 404, 'not_found')
  const refused = await api.post('/v1/app/ptn/leave', { ptnID })
  assertError(refused, 409, 'conflict')
  assert.match(refused.body.error.message, /force/)
  assert.deepEqual(await memberships(api), before)
  assert.ok(existsSync(caKeyPath(dataDir, ptnID)), 'the key is still there')

  const left = await api.post('/v1/app/ptn/leave', { ptnID, force: true })
  assert.equal(left.status, 200)
  assert.deepEqual(left.body, { status: 'left', ptnID })
  assert.ok(!existsSync(caKeyPath(dataDir, ptnID)), 'the CA key went with the membership')
  assert.deepEqual(await memberships(api), { memberships: [{ ptnID, name: 'solo', role: 'admin', members: 0, status: 'left' }] })
  assert.equal((await api.get('/v1/app')).body.ptn.memberships, 0)
  assertError(await api.post('/v1/app/ptn/invite', { ptnID }), 403, 'permission_error')

  const again = await api.post('/v1/app/ptn/leave', { ptnID })
  assert.deepEqual([again.status, again.body], [200, { status: 'left', ptnID }])
  // Without the key and with no other admin, nobody can re-establish it.
  assertError(await api.post('/v1/app/ptn/recover', { ptnID }), 503, 'service_unavailable')
  assert.deepEqual((await memberships(api) as { memberships: Array<{ status: string }> }).memberships.map(m => m.status), ['left'])
})

test('promote-admin: admins only; the target must be a known member (404) and reachable (503); nothing changes', async (t) => {
  const [admin, member] = await Promise.all([startTestNode(t), startTestNode(t)])
  const { body: { ptnID } } = await admin.api.post('/v1/app/ptn/create', { name: 'lab' })
  const { body: { certData } } = await admin.api.post('/v1/app/ptn/issue-cert', { ptnID, nodeID: member.nodeID })
  assert.equal((await member.api.post('/v1/app/ptn/join-with-cert', { certData })).status, 200)
  const before = [await memberships(admin.api), await memberships(member.api)]

  for (const [body, param] of [[{ nodeID: member.nodeID }, 'ptnID'], [{ ptnID }, 'nodeID'], [{ ptnID, nodeID: 'bob' }, 'nodeID']] as const) {
    assertError(await admin.api.post('/v1/app/ptn/promote-admin', body), 400, 'invalid_request_error', param)
  }
  assertError(await admin.api.post('/v1/app/ptn/promote-admin', { ptnID: UNKNOWN_PTN, nodeID: member.nodeID }), 404, 'not_found')
  const stranger = identityFromSeed(generateSeed()).nodeID
  const notMember = await admin.api.post('/v1/app/ptn/promote-admin', { ptnID, nodeID: stranger })
  assertError(notMember, 404, 'not_found')
  assert.match(notMember.body.error.message, new RegExp(stranger))
  assertError(await admin.api.post('/v1/app/ptn/promote-admin', { ptnID, nodeID: admin.nodeID }), 409, 'conflict')
  assertError(await admin.api.post('/v1/app/ptn/promote-admin', { ptn_id: ptnID, node_id: member.nodeID }), 503, 'service_unavailable')
  assertError(await member.api.post('/v1/app/ptn/promote-admin', { ptnID, nodeID: admin.nodeID }), 403, 'permission_error')
  assert.deepEqual([await memberships(admin.api), await memberships(member.api)], before)
  assert.ok(!existsSync(caKeyPath(member.dataDir, ptnID)))
})

test('import-ca-key: only the PTN\'s own key is accepted; it makes a member an admin that can issue', async (t) => {
  const [admin, member] = await Promise.all([startTestNode(t), startTestNode(t)])
  const { body: { ptnID } } = await admin.api.post('/v1/app/ptn/create', { name: 'lab' })
  const { body: { certData } } = await admin.api.post('/v1/app/ptn/issue-cert', { ptnID, nodeID: member.nodeID })
  assert.equal((await member.api.post('/v1/app/ptn/join-with-cert', { certData })).status, 200)
  const { body: { ptnID: otherPtn } } = await admin.api.post('/v1/app/ptn/create', { name: 'other' })
  const before = await memberships(member.api)

  const wrongKeys = [readCaKeyHex(admin.dataDir, otherPtn), Buffer.from(generateSeed()).toString('hex'), 'zz'.repeat(32), '1234']
  for (const caKeyHex of wrongKeys) {
    assertError(await member.api.post('/v1/app/ptn/import-ca-key', { ptnID, caKeyHex }), 400, 'invalid_request_error', 'caKeyHex')
  }
  for (const [body, param] of [[{ ptnID }, 'caKeyHex'], [{ caKeyHex: 'ab' }, 'ptnID'], [{ ptnID, caKeyHex: 5 }, 'caKeyHex']] as const) {
    assertError(await member.api.post('/v1/app/ptn/import-ca-key', body), 400, 'invalid_request_error', param)
  }
  assertError(await member.api.post('/v1/app/ptn/import-ca-key', { ptnID: otherPtn, caKeyHex: readCaKeyHex(admin.dataDir, otherPtn) }), 404, 'not_found')
  assert.deepEqual(await memberships(member.api), before)
  assert.ok(!existsSync(caKeyPath(member.dataDir, ptnID)))
  assertError(await member.api.post('/v1/app/ptn/issue-cert', { ptnID, nodeID: admin.nodeID }), 403, 'permission_error')

  const imported = await member.api.post('/v1/app/ptn/import-ca-key', { ptn_id: ptnID, ca_key_hex: readCaKeyHex(admin.dataDir, ptnID) })
  assert.deepEqual([imported.status, imported.body], [200, { status: 'imported', ptnID }])
  assert.equal(statSync(caKeyPath(member.dataDir, ptnID)).mode & 0o777, 0o600)
  assert.deepEqual((await memberships(member.api) as { memberships: Array<{ role: string, status: string }> }).memberships.map(m => [m.role, m.status]), [['admin', 'active']])
  const issued = await member.api.post('/v1/app/ptn/issue-cert', { ptnID, nodeID: identityFromSeed(generateSeed()).nodeID })
  assert.equal(issued.status, 200)
  assert.equal(decodeDocument(issued.body.certData).payload.issuerNodeID, member.nodeID)
})

test('recover with the CA key re-signs this node\'s certificate; bad input refused', async (t) => {
  const { api } = await startTestNode(t)
  const { body: { ptnID } } = await api.post('/v1/app/ptn/create', { name: 'lab' })
  for (const body of [{}, { ptnID: 1 }, { ptnID: 'lab' }]) assertError(await api.post('/v1/app/ptn/recover', body), 400, 'invalid_request_error', 'ptnID')
  assertError(await api.post('/v1/app/ptn/recover', { ptnID: UNKNOWN_PTN }), 404, 'not_found')
  const recovered = await api.post('/v1/app/ptn/recover', { ptn_id: ptnID })
  assert.deepEqual([recovered.status, recovered.body], [200, { status: 'recovered', ptnID }])
  assert.deepEqual(await memberships(api), { memberships: [{ ptnID, name: 'lab', role: 'admin', members: 1, status: 'recovered' }] })
  assert.equal((await api.get('/v1/app')).body.ptn.memberships, 1, 'a recovered membership is in effect')
  assert.equal((await api.post('/v1/app/ptn/invite', { ptnID })).status, 200, 'and the admin still administers it')
})
