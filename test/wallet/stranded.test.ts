// A transfer stranded by a payee that cannot take it is reported with the payee named (it used to say
// "unreachable: undefined"), listed by GET /v1/app/wallet/pending, and delivered when the payee comes back online.
import assert from 'node:assert/strict'
import { test } from 'node:test'
import { nodeIDToPeerId } from '../../src/network/host/libp2p-node.ts'
import { TRANSFER_PROTOCOL } from '../../src/wallet/index.ts'
import { TransferRequest } from '../../src/wallet/transfer-protocol.ts'
import { serveRequest } from '../../src/wire/index.ts'
import { startTestRelay, startWanNode } from '../support/network.ts'
import { waitFor } from '../support/node.ts'
import { directAddrs, serveRecord, standInHost, standInRecord } from '../support/stand-in.ts'

interface Pending { id: string, peerID: string, amount: number, memo: string, createdAt: string, attempts: number, lastError: string | null, nextAttemptAt: string }

test('a stranded transfer names its payee, is listed as pending, and goes out when the payee comes back online', async (t) => {
  const relay = await startTestRelay(t)
  const payer = await startWanNode(t, relay)
  await waitFor(() => payer.node.network.relayConnected, { what: 'WAN on at the payer' })

  // The payee: a peer that advertises itself like any node but does not take transfers yet.
  const payee = await standInHost(t)
  await serveRecord(payee, () => standInRecord(payee.identity))
  const payerAddrs = directAddrs(payer)
  await payee.host.dial(payerAddrs)
  await waitFor(() => payer.node.network.isKnownPeer(payee.identity.nodeID), { what: 'the payee in the payer\'s table' })

  const sent = await payer.api.post('/v1/app/wallet/send', { peerID: payee.identity.nodeID, amount: 3, memo: 'rent' })
  assert.equal(sent.status, 200, JSON.stringify(sent.body))
  const stranded = await waitFor(async () => {
    const { transfers } = (await payer.api.get('/v1/app/wallet/pending')).body as { transfers: Pending[] }
    return transfers.length === 1 && transfers[0].lastError != null ? transfers[0] : undefined
  }, { what: 'the failed delivery to be listed' })
  assert.equal(stranded.id, sent.body.transactionID)
  assert.equal(stranded.peerID, payee.identity.nodeID)
  assert.equal(stranded.amount, 3)
  assert.equal(stranded.memo, 'rent')
  assert.ok(stranded.attempts >= 1)
  assert.ok(Number.isFinite(Date.parse(stranded.nextAttemptAt)))
  assert.ok(stranded.lastError?.includes(payee.identity.nodeID), `the payee is named: ${stranded.lastError}`)
  assert.doesNotMatch(stranded.lastError ?? '', /undefined|\[object/)
  assert.equal((await payer.api.get('/v1/app/wallet')).body.pendingTransfers, 1)

  // The payee comes back taking transfers: the transfer goes out at once, is credited once, and leaves the list.
  const received: string[] = []
  await payee.host.handle(TRANSFER_PROTOCOL, async (stream) => {
    await serveRequest(stream, TransferRequest, (request) => ({
      acks: request.transfers.map((envelope) => {
        const id = (envelope as { body: { id: string } }).body.id
        received.push(id)
        return { id, status: 'applied', reason: null }
      })
    }), { maxRequestBytes: 128 * 1024, timeoutMs: 5_000 })
  }, { runOnLimitedConnection: true })
  await payee.host.hangUp(nodeIDToPeerId(payer.nodeID))
  await waitFor(() => !payer.node.network.isKnownPeer(payee.identity.nodeID), { what: 'the payee offline' })
  await payee.host.dial(payerAddrs)
  await waitFor(async () => (await payer.api.get('/v1/app/wallet')).body.pendingTransfers === 0, { what: 'the transfer acknowledged once the payee is back' })
  assert.deepEqual(received, [sent.body.transactionID])
  assert.deepEqual((await payer.api.get('/v1/app/wallet/pending')).body, { transfers: [] })
})

test('GET /v1/app/wallet/pending: bad paging is a 400 and lists nothing', async (t) => {
  const relay = await startTestRelay(t)
  const node = await startWanNode(t, relay)
  for (const query of ['limit=0', 'limit=501', 'limit=abc', 'limit=1.5', 'limit=0x10', 'offset=-1', 'offset=x']) {
    const res = await node.api.get(`/v1/app/wallet/pending?${query}`)
    assert.equal(res.status, 400, `${query}: ${JSON.stringify(res.body)}`)
    assert.equal(res.body.error.type, 'invalid_request_error')
  }
  assert.deepEqual((await node.api.get('/v1/app/wallet/pending?limit=500&offset=0')).body, { transfers: [] })
})
