// Many relays: `wan_relay_url` names one relay or several separated by commas; a node holds reservations on
// two, learns relays from its peers' addresses, and losing one relay isolates nobody.
import assert from 'node:assert/strict'
import { test } from 'node:test'
import type { MultiaddrConnection } from '@libp2p/interface'
import { multiaddr } from '@multiformats/multiaddr'
import { pino } from 'pino'
import { generateSeed, identityFromSeed } from '../../src/identity/index.ts'
import { ADVERTS_TOPIC, signAdvert } from '../../src/network/adverts/adverts.ts'
import { inboundConnectionLimit } from '../../src/network/host/libp2p-node.ts'
import { peerIdFromIdentity } from '../../src/network/host/peer-ids.ts'
import { signCapabilities } from '../../src/network/peers/capabilities.ts'
import { startLightNode, type LightNode } from '../support/light-network.ts'
import { FAST_NETWORK, startTestRelay } from '../support/network.ts'
import { startTestNode, waitFor } from '../support/node.ts'
import { standInRecord } from '../support/stand-in.ts'

test('wan_relay_url takes one relay or several separated by commas; a bad one among them is refused, nothing changed', async (t) => {
  const node = await startTestNode(t)
  const before = (await node.api.get('/v1/app')).body.settings
  const good = 'ws://127.0.0.1:4001, wss://relay.example.org,/ip4/10.0.0.1/tcp/4001/ws'
  const res = await node.api.patch('/v1/app/settings', { wan_relay_url: good })
  assert.equal(res.status, 200, JSON.stringify(res.body))
  assert.equal(res.body.wan_relay_url, good)
  for (const bad of ['ws://127.0.0.1:4001,http://x.org', 'ws://a.org,,ws://b.org', 'ws://a.org,', Array.from({ length: 9 }, (_, i) => `ws://r${i}.org`).join(','), ',', 'ws://a.org,not a url']) {
    const refused = await node.api.patch('/v1/app/settings', { wan_relay_url: bad })
    assert.equal(refused.status, 400, `${bad}: ${JSON.stringify(refused.body)}`)
    assert.equal(refused.body.error.param, 'wan_relay_url', bad)
  }
  assert.equal((await node.api.get('/v1/app')).body.settings.wan_relay_url, good)
  assert.notEqual(before.wan_relay_url, good)
})

/** Every node lists every other one among its peers (connected, or known by its advert and reachable on demand). */
async function waitAllSeeAll (nodes: LightNode[], what: string): Promise<void> {
  await waitFor(() => nodes.every(node => nodes.every(other => other === node || node.network.peers().some(peer => peer.nodeID === other.nodeID))), { timeoutMs: 60_000, what })
}

test('new inbound connections are limited per address for direct ones only: relayed ones do not spend the relay\'s budget', () => {
  const deny = inboundConnectionLimit(5)
  const from = (address: string): MultiaddrConnection => ({ remoteAddr: multiaddr(address) }) as unknown as MultiaddrConnection
  const relay = '/ip4/203.0.113.7/tcp/4001/ws/p2p/12D3KooWGKjq996vrXTWASV3vfxAsieDQD1pQknT4pc9NfMaDynP/p2p-circuit/p2p/'
  const dialers = ['12D3KooWCz6tBnGq4jX2erVtkR15G8i76cU7oJcs7RmugneTNewN', '12D3KooWAoNzVTkYfT8Y4KwNQhAxS8U2cDt8c7gqYJQYjxE4oB3s']
  // 20 relayed connections in the same second (a relay's nodes coming back through it after another one died): all in.
  for (let i = 0; i < 20; i++) assert.equal(deny(from(relay + dialers[i % 2])), false, `relayed connection ${i + 1}`)
  // The same relay host dialing directly has its whole budget; the sixth direct connection in a second is refused.
  for (let i = 0; i < 5; i++) assert.equal(deny(from(`/ip4/203.0.113.7/tcp/${40_000 + i}`)), false, `direct connection ${i + 1}`)
  assert.equal(deny(from('/ip4/203.0.113.7/tcp/40005')), true, 'the sixth direct connection from one address in a second')
  assert.equal(deny(from('/ip6/2001:db8::1/tcp/4001')), false, 'another address has its own budget')
})

test('two relays, one killed: every node still sees every other; a node told of one relay learns the other from its peers', { timeout: 180_000 }, async (t) => {
  const [r1, r2] = await Promise.all([startTestRelay(t), startTestRelay(t)])
  // No direct addresses: the relays are the only way between the nodes.
  const both = await Promise.all([0, 1, 2].map(async () => await startLightNode({ relayUrls: [r1.url, r2.url], listen: [], network: FAST_NETWORK })))
  const onlyFirst = await startLightNode({ relayUrls: [r1.url], listen: [], network: FAST_NETWORK })
  const nodes = [...both, onlyFirst]
  t.after(async () => { await Promise.all(nodes.map(async node => { await node.stop() })) })

  await waitAllSeeAll(nodes, 'every node to see every other through the relays')
  const relays = [r1.relay.peerId.toString(), r2.relay.peerId.toString()]
  await waitFor(() => both.every(node => relays.every(relay => node.network.addresses().some(addr => addr.includes(`/p2p/${relay}/p2p-circuit`)))), {
    timeoutMs: 30_000, what: 'reservations on both relays'
  })
  await waitFor(() => onlyFirst.network.connectedRelays().includes(relays[1]), { timeoutMs: 30_000, what: 'the node told of one relay to use the one it learned from its peers' })
  await waitFor(() => nodes.every(node => r2.relay.directory.list().some(record => record.signer === node.nodeID)), { timeoutMs: 30_000, what: 'every node to register at the second relay' })

  await r1.stop()
  await waitFor(() => nodes.every(node => !node.network.connectedRelays().includes(relays[0])), { timeoutMs: 30_000, what: 'the nodes to lose the first relay' })
  await waitAllSeeAll(nodes, 'every node to see every other through the second relay')
  // Seeing is not enough: every node reaches every other through the relay left (connected to it, or on demand).
  const server = nodes[0]
  server.serve('after-relay-loss-model')
  for (const node of nodes.slice(1)) {
    await waitFor(() => node.router.candidates('after-relay-loss-model').length > 0, { timeoutMs: 60_000, what: `node ${nodes.indexOf(node)} to hear of the model` })
    const { servedBy } = await node.ask('after-relay-loss-model', 'hi')
    assert.equal(servedBy, `peer:${server.nodeID}`)
  }
  for (const node of nodes) {
    assert.ok(node.network.host.getConnections().every(conn => !conn.remoteAddr.toString().includes(relays[0])), 'no connection left through the killed relay')
  }
})

test('an advert naming a node as its relay does not make that node a relay: it stays a peer, and is given up as a relay when it does not answer as one', { timeout: 180_000 }, async (t) => {
  const relay = await startTestRelay(t)
  // One relay configured, so that the node learns relays from its peers' addresses.
  const logged: Array<{ msg: string, relay?: string }> = []
  const log = pino({ level: 'info' }, { write: (line: string) => { logged.push(JSON.parse(line) as { msg: string, relay?: string }) } })
  const [node, victim, gossiper] = await Promise.all([log, undefined, undefined].map(async (nodeLog) => await startLightNode({ relayUrls: [relay.url], network: FAST_NETWORK, log: nodeLog })))
  t.after(async () => { await Promise.all([node, victim, gossiper].map(async light => { await light.stop() })) })
  await waitAllSeeAll([node, victim, gossiper], 'the three nodes to see each other')
  const victimPeer = victim.network.host.peerId.toString()
  const victimAddr = victim.network.addresses().find(addr => addr.startsWith('/ip4/127.0.0.1/tcp/') && !addr.includes('/p2p-circuit'))
  assert.ok(victimAddr != null, `a direct address of the victim: ${victim.network.addresses().join(' ')}`)

  // Anyone may sign an advert with a key of its own; this one says it is reached through the victim, as through a relay.
  const liar = identityFromSeed(generateSeed())
  const advert = signAdvert(liar, signCapabilities(liar, standInRecord(liar)), [`${victimAddr}/p2p-circuit/p2p/${peerIdFromIdentity(liar).toString()}`])
  await gossiper.network.host.services.pubsub.publish(ADVERTS_TOPIC, Buffer.from(JSON.stringify(advert)))
  await waitFor(() => node.network.peers().some(peer => peer.nodeID === liar.nodeID), { timeoutMs: 30_000, what: "the liar's advert to reach the node" })

  // The node tries the victim as a relay (it has one, and wants two); the victim answers no directory sync, so it is
  // given up, and was a peer all along.
  const about = (msg: string) => logged.some(line => line.msg === msg && line.relay?.includes(victimPeer) === true)
  await waitFor(() => about('using a relay learned from a peer'), { timeoutMs: 30_000, what: 'the victim tried as a relay' })
  await waitFor(() => about('giving up on a relay that never answered as one'), { timeoutMs: 60_000, what: 'the victim given up as a relay' })
  assert.ok(node.network.isKnownPeer(victim.nodeID), 'the victim is still a peer')
  assert.ok(node.network.peers().some(peer => peer.nodeID === victim.nodeID), "and in the node's peer table")
  assert.deepEqual(node.network.connectedRelays(), [relay.relay.peerId.toString()])
  victim.serve('victim-model')
  await waitFor(() => node.router.candidates('victim-model').length > 0, { timeoutMs: 30_000, what: 'the node to hear of the victim\'s model' })
  assert.equal((await node.ask('victim-model', 'hi')).servedBy, `peer:${victim.nodeID}`)
})
