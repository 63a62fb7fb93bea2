import { test } from 'node:test'
import assert from 'node:assert/strict'
import { pino } from 'pino'
import { generateSeed, identityFromSeed } from '../../src/identity/index.ts'
import { CLUSTER_PROTOCOL, createClusterHandler, deriveClusterKey, joinCluster } from '../../src/network/lan/cluster.ts'
import { ProtocolError } from '../../src/wire/index.ts'
import { createPeerHost, handleProtocol, peerIdToNodeID } from '../../src/network/host/libp2p-node.ts'
import { startTestNode, waitFor } from '../support/node.ts'
import { FAST_NETWORK } from '../support/network.ts'

const log = pino({ level: 'silent' })

test('a fresh node has no peers; WAN on with a relay that does not answer changes nothing but the attempts', async (t) => {
  const node = await startTestNode(t, { network: FAST_NETWORK })
  assert.deepEqual((await node.api.get('/v1/app/peers')).body, { peers: [] })
  assert.deepEqual((await node.api.get('/v1/app')).body.peers, { lan: 0, wan: 0 })
  const openapi = (await node.api.get('/openapi.json')).body
  assert.ok(openapi.paths['/v1/app/peers'] != null, 'the route is in the OpenAPI document')

  // Enabling WAN needs a relay URL (settings validation), and a relay that is down does not fail the node.
  const refused = await node.api.patch('/v1/app/settings', { wan_enabled: true })
  assert.equal(refused.status, 400)
  assert.equal(refused.body.error.param, 'wan_relay_url')
  const res = await node.api.patch('/v1/app/settings', { wan_enabled: true, wan_relay_url: 'ws://127.0.0.1:9' })
  assert.equal(res.status, 200)
  assert.equal((await node.api.get('/health')).status, 200)
  assert.equal(node.node.network.relayConnected, false)
  assert.deepEqual((await node.api.get('/v1/app/peers')).body, { peers: [] })
})

test('cluster handshake: the same passcode admits both sides; with another passcode the initiator stops before it sends its own proof', async (t) => {
  const hosts = await Promise.all([0, 1, 2].map(async () => {
    const identity = identityFromSeed(generateSeed())
    const host = await createPeerHost(identity, { log })
    t.after(() => host.stop())
    return { identity, host, admitted: [] as string[] }
  }))
  const [responder, friend, stranger] = hosts
  const key = await deriveClusterKey('correct horse battery staple')
  await handleProtocol(responder.host, CLUSTER_PROTOCOL, async (stream, connection) => {
    try {
      await createClusterHandler({ key: async () => key, localNodeID: responder.identity.nodeID, admit: (id) => { responder.admitted.push(id) } })(stream, peerIdToNodeID(connection.remotePeer))
    } catch (err) {
      stream.abort(err as Error)
    }
  }, { maxInboundStreams: 4 })
  await friend.host.dial(responder.host.getMultiaddrs())
  await stranger.host.dial(responder.host.getMultiaddrs())

  await joinCluster(friend.host, responder.host.peerId, { key, localNodeID: friend.identity.nodeID, remoteNodeID: responder.identity.nodeID })
  assert.deepEqual(responder.admitted, [friend.identity.nodeID])

  const wrong = await deriveClusterKey('wrong passcode')
  await assert.rejects(joinCluster(stranger.host, responder.host.peerId, { key: wrong, localNodeID: stranger.identity.nodeID, remoteNodeID: responder.identity.nodeID }),
    (err: unknown) => err instanceof ProtocolError && err.code === 'refused' && /does not know the cluster passcode/.test(err.message))
  // The stranger stopped before sending a proof of its own: the responder admitted nobody else.
  await waitFor(() => responder.host.getConnections(stranger.host.peerId).every(c => c.streams.every(stream => stream.protocol?.startsWith('/meshnode/cluster/') !== true)), { what: 'the handshake stream to end' })
  assert.deepEqual(responder.admitted, [friend.identity.nodeID])
  assert.notDeepEqual(key, wrong)
})
