// GET /v1/app/events beyond the model events (those are in models.test.ts): settings, wallet and peer events, as the
// dashboard follows them, between real nodes on loopback.
import { test } from 'node:test'
import type { TestContext } from 'node:test'
import assert from 'node:assert/strict'
import { readSse } from '../../src/cli/sse.ts'
import { startTestRelay, startWanNode, waitForPeers } from '../support/network.ts'
import { startTestNode, waitFor, type Api } from '../support/node.ts'

interface Received { event: string, data: any } // eslint-disable-line @typescript-eslint/no-explicit-any

/** A live subscription that collects every event until the test ends. */
async function subscribe (t: TestContext, api: Api): Promise<{ events: Received[], next: (event: string, match?: (data: any) => boolean) => Promise<Received> }> { // eslint-disable-line @typescript-eslint/no-explicit-any
  const controller = new AbortController()
  const response = await fetch(`${api.url}/v1/app/events`, { signal: controller.signal })
  assert.equal(response.status, 200)
  const events: Received[] = []
  const done = (async () => {
    try {
      for await (const { event, data } of readSse(response)) events.push({ event, data: JSON.parse(data) })
    } catch (err) {
      if (!controller.signal.aborted) throw err // our own hang-up at the end of the test is expected
    }
  })()
  t.after(async () => {
    controller.abort()
    await done
  })
  return {
    events,
    next: async (event, match = () => true) => await waitFor(() => events.find((e) => e.event === event && match(e.data)), { what: `event ${event}` })
  }
}

test('a settings change is announced by key names only: a secret never goes out on the stream', async (t) => {
  const { api } = await startTestNode(t)
  const stream = await subscribe(t, api)
  assert.equal((await api.patch('/v1/app/settings', { cluster_passcode: 'hunter2-secret', language: 'zh' })).status, 200)
  const changed = await stream.next('settings.changed')
  assert.deepEqual(changed.data, { changed: ['cluster_passcode', 'language'] })
  assert.equal((await api.patch('/v1/app/settings', { language: 'nope' })).status, 400)
  assert.equal((await api.patch('/v1/app/settings', { language: 'en' })).status, 200)
  await stream.next('settings.changed', (data) => data.changed.includes('language') && data.changed.length === 1)
  assert.equal(stream.events.filter((e) => e.event === 'settings.changed').length, 2, 'a refused patch announces nothing')
  assert.ok(!JSON.stringify(stream.events).includes('hunter2'))
})

test('a send is a wallet.transaction on both nodes, each with its new balance; peers come and go as peer events', async (t) => {
  const relay = await startTestRelay(t)
  const a = await startWanNode(t, relay)
  const aStream = await subscribe(t, a.api)
  const b = await startWanNode(t, relay)
  const bStream = await subscribe(t, b.api)
  await waitForPeers(a, [b.nodeID])
  await waitForPeers(b, [a.nodeID])
  const online = await aStream.next('peer.online', (data) => data.nodeID === b.nodeID)
  assert.equal(online.data.type, 'wan')
  assert.equal(typeof online.data.name, 'string')

  const sent = await a.api.post('/v1/app/wallet/send', { amount: 2.5, peerID: b.nodeID, memo: 'for the dashboard' })
  assert.equal(sent.status, 200)
  const spend = await aStream.next('wallet.transaction', (data) => data.id === sent.body.transactionID)
  assert.deepEqual({ ...spend.data, timestamp: null }, {
    id: sent.body.transactionID, type: 'spend', amount: 2.5, peerID: b.nodeID, memo: 'for the dashboard', timestamp: null, balance: 97.5
  })
  const earn = await bStream.next('wallet.transaction', (data) => data.id === sent.body.transactionID)
  assert.equal(earn.data.type, 'earn')
  assert.equal(earn.data.peerID, a.nodeID)
  assert.equal(earn.data.balance, 102.5)
  assert.equal((await b.api.get('/v1/app/wallet')).body.currentBalance, 102.5)

  // A refused send (over the balance) is no event.
  assert.equal((await a.api.post('/v1/app/wallet/send', { amount: 1000, peerID: b.nodeID })).status, 402)
  assert.equal(aStream.events.filter((e) => e.event === 'wallet.transaction').length, 1)

  assert.equal((await b.api.patch('/v1/app/settings', { wan_enabled: false })).status, 200)
  await aStream.next('peer.offline', (data) => data.nodeID === b.nodeID)
})

test('transactions page with offset: pages do not overlap; a bad offset is a 400 naming it', async (t) => {
  const { api } = await startTestNode(t)
  const all = (await api.get('/v1/app/wallet/transactions?limit=500')).body.transactions
  assert.equal(all.length, 1, 'the grant')
  const page = await api.get('/v1/app/wallet/transactions?limit=1&offset=1')
  assert.equal(page.status, 200)
  assert.deepEqual(page.body.transactions, [])
  assert.deepEqual((await api.get('/v1/app/wallet/transactions?limit=1&offset=0')).body.transactions, all)
  for (const offset of ['-1', '1.5', 'abc', '1e99']) {
    const res = await api.get(`/v1/app/wallet/transactions?offset=${offset}`)
    assert.equal(res.status, 400, offset)
    assert.equal(res.body.error.param, 'offset', offset)
  }
})
