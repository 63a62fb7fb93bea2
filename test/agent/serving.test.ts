// An agent message is a generation a peer asks for, and passes the serving policy like a chat request over
// the infer protocol: `inference_backend: peers` serves no peer, and `org_capacity_reservation` keeps slots for PTN
// members. (Before, the agent called the engine directly and skipped both.)
import assert from 'node:assert/strict'
import { test } from 'node:test'
import { startChatNode } from '../support/chat-node.ts'
import { FAST_NETWORK, startTestRelay, startWanNode, waitForPeers, wanSettings } from '../support/network.ts'
import { waitFor, type Api } from '../support/node.ts'

async function filed (api: Api): Promise<number> {
  return (await api.get('/v1/app/agent/conversations')).body.conversations.length
}

test('agent messages obey inference_backend: peers and the capacity reserved for PTN members', async (t) => {
  const relay = await startTestRelay(t)
  const [a, b] = await Promise.all([
    startWanNode(t, relay, { agent: { maxAnswerTokens: 4 } }),
    startChatNode(t, { network: FAST_NETWORK, agent: { maxAnswerTokens: 4 } })
  ])
  assert.equal((await b.api.patch('/v1/app/settings', wanSettings(relay))).status, 200)
  await Promise.all([waitForPeers(a, [b.nodeID]), waitForPeers(b, [a.nodeID])])

  // inference_backend: peers: B runs no generation for any peer, its agent's answers included.
  assert.equal((await b.api.patch('/v1/app/settings', { inference_backend: 'peers' })).status, 200)
  const backend = await a.api.post('/v1/app/agent/conversations', { peerID: b.nodeID, message: 'Hello?' })
  assert.equal(backend.status, 503, JSON.stringify(backend.body))
  assert.match(backend.body.error.message, /inference_backend is peers/)
  assert.equal(await filed(a.api), 0)
  assert.equal(await filed(b.api), 0)

  // Every slot reserved for B's PTN members: A, an outsider, is refused before any work.
  assert.equal((await b.api.patch('/v1/app/settings', { inference_backend: 'llama.cpp', org_capacity_reservation: 1 })).status, 200)
  const reserved = await a.api.post('/v1/app/agent/conversations', { peerID: b.nodeID, message: 'Hello?' })
  assert.equal(reserved.status, 503, JSON.stringify(reserved.body))
  assert.match(reserved.body.error.message, /outside its PTNs/)
  assert.equal(await filed(b.api), 0)

  // A joins B's PTN: its certificate reaches B in A's record, and then B's agent answers it.
  const { ptnID } = (await b.api.post('/v1/app/ptn/create', { name: 'org' })).body
  const { certData } = (await b.api.post('/v1/app/ptn/issue-cert', { ptnID, nodeID: a.nodeID })).body
  assert.equal((await a.api.post('/v1/app/ptn/join-with-cert', { certData })).status, 200)
  await waitFor(() => b.node.network.peer(a.nodeID)?.ptnIDs.includes(ptnID), { what: 'B to see A\'s membership' })
  const member = await a.api.post('/v1/app/agent/conversations', { peerID: b.nodeID, message: 'Hello?' })
  assert.equal(member.status, 200, JSON.stringify(member.body))
  assert.equal(member.body.reply.from, b.nodeID)
  assert.equal(await filed(b.api), 1)
})
