import { test } from 'node:test'
import assert from 'node:assert/strict'
import { startTestNode, waitFor } from '../support/node.ts'
import { startTestRelay, waitForPeers, wanSettings } from '../support/network.ts'

test('with WAN and the LAN cluster off the node does not listen for peers; switching WAN on starts the network at once', async (t) => {
  const relay = await startTestRelay(t)
  const [a, b] = await Promise.all([startTestNode(t), startTestNode(t)])
  assert.deepEqual(a.node.network.addresses(), [], 'no peer listener while networking is off')
  assert.deepEqual((await a.api.get('/v1/app/peers')).body.peers, [])
  await assert.rejects(a.node.network.open(b.nodeID, '/meshnode/test/1.0.0'), /not started/)

  for (const node of [a, b]) assert.equal((await node.api.patch('/v1/app/settings', wanSettings(relay))).status, 200)
  await waitFor(() => a.node.network.addresses().length > 0, { what: 'the peer network to start' })
  await Promise.all([waitForPeers(a, [b.nodeID]), waitForPeers(b, [a.nodeID])])
  assert.deepEqual((await a.api.get('/v1/app/peers')).body.peers.map((p: { nodeID: string }) => p.nodeID), [b.nodeID])
})
