// A payee that refuses a transfer gets it again after the outbox's backoff, or when it comes back online,
// and at no other time. Before, every heartbeat's record update sent it again (and rewrote its row) every 10 s.
import assert from 'node:assert/strict'
import { test } from 'node:test'
import { CAPABILITIES_PROTOCOL, pushCapabilities, signCapabilities } from '../../src/network/peers/capabilities.ts'
import { nodeIDToPeerId, openStream } from '../../src/network/host/libp2p-node.ts'
import { TRANSFER_PROTOCOL } from '../../src/wallet/index.ts'
import { TransferRequest } from '../../src/wallet/transfer-protocol.ts'
import { serveRequest } from '../../src/wire/index.ts'
import { startTestRelay, startWanNode } from '../support/network.ts'
import { waitFor } from '../support/node.ts'
import { directAddrs, serveRecord, standInHost, standInRecord } from '../support/stand-in.ts'

test('a refused transfer is not sent again while the payee\'s record keeps changing; it is when the payee comes back online', async (t) => {
  const relay = await startTestRelay(t)
  const payer = await startWanNode(t, relay)
  await waitFor(() => payer.node.network.relayConnected, { what: 'WAN on at the payer' })

  // The payee: a node of other code that advertises itself like any node and refuses every transfer.
  const payee = await standInHost(t)
  let version = 1
  await serveRecord(payee, () => standInRecord(payee.identity, { version }))
  const deliveries: string[] = []
  await payee.host.handle(TRANSFER_PROTOCOL, async (stream) => {
    await serveRequest(stream, TransferRequest, (request) => ({
      acks: request.transfers.map((envelope) => {
        const id = (envelope as { body: { id: string } }).body.id
        deliveries.push(id)
        return { id, status: 'refused', reason: 'this payee takes no credits today' }
      })
    }), { maxRequestBytes: 128 * 1024, timeoutMs: 5_000 })
  }, { runOnLimitedConnection: true })
  const payerAddrs = directAddrs(payer)
  await payee.host.dial(payerAddrs)
  await waitFor(() => payer.node.network.isKnownPeer(payee.identity.nodeID), { what: 'the payee in the payer\'s table' })

  const sent = await payer.api.post('/v1/app/wallet/send', { peerID: payee.identity.nodeID, amount: 1 })
  assert.equal(sent.status, 200, JSON.stringify(sent.body))
  await waitFor(() => deliveries.length === 1, { what: 'the first delivery' })

  // Twenty record updates reach the payer (each one a peer:updated, as heartbeats were): no redelivery.
  const updates: number[] = []
  payer.node.network.on('peer:updated', (peer) => { if (peer.nodeID === payee.identity.nodeID) updates.push(peer.record.version) })
  for (let i = 0; i < 20; i++) {
    version++
    const stream = await openStream(payee.host, nodeIDToPeerId(payer.nodeID), CAPABILITIES_PROTOCOL)
    await pushCapabilities(stream, signCapabilities(payee.identity, standInRecord(payee.identity, { version })))
  }
  await waitFor(() => updates.length === 20, { what: 'the payer to take every update' })
  assert.equal(payer.node.network.peer(payee.identity.nodeID)?.record.version, version)
  assert.deepEqual(deliveries, [sent.body.transactionID], 'delivered once, not once per update')
  assert.equal((await payer.api.get('/v1/app/wallet')).body.pendingTransfers, 1, 'still pending: it was refused')

  // The payee leaves and comes back online: that is worth a try at once.
  await payee.host.hangUp(nodeIDToPeerId(payer.nodeID))
  await waitFor(() => !payer.node.network.isKnownPeer(payee.identity.nodeID), { what: 'the payee offline' })
  await payee.host.dial(payerAddrs)
  await waitFor(() => deliveries.length === 2, { what: 'a delivery when the payee came back online' })
  assert.deepEqual(deliveries, [sent.body.transactionID, sent.body.transactionID])
})
