// The agent protocol facing raw libp2p peers of our own (real hosts on loopback, speaking it badly on purpose): forged,
// oversized and misaddressed messages and injections into another peer's conversation are refused and nothing is
// filed; a peer without the agent protocol is unreachable (503); the directory follows peers' signed records.
import assert from 'node:assert/strict'
import { randomUUID } from 'node:crypto'
import { test, type TestContext } from 'node:test'
import { AGENT_PROTOCOL, AgentReplyFrame, openAgentMessage, signAgentMessage, type AgentMessage } from '../../src/agent/index.ts'
import { generateSeed, identityFromSeed, type NodeIdentity } from '../../src/identity/index.ts'
import type { CapabilityRecord } from '../../src/network/peers/capabilities.ts'
import { openFrames, readMessage, signEnvelope, writeMessage } from '../../src/wire/index.ts'
import { nodeIDToPeerId, type PeerHost } from '../../src/network/host/libp2p-node.ts'
import { startChatNode, TINY_MODEL_ID } from '../support/chat-node.ts'
import { FAST_NETWORK, startTestRelay, wanSettings } from '../support/network.ts'
import { waitFor, type TestNode } from '../support/node.ts'
import { directAddrs, serveRecord, standInHost, standInRecord } from '../support/stand-in.ts'

interface Raw {
  identity: NodeIdentity
  host: PeerHost
}

async function rawPeer (t: TestContext, options: { agent?: CapabilityRecord['agent'] } = {}): Promise<Raw> {
  const raw = await standInHost(t)
  // Answers capability fetches like a node (so it enters the peer table), but has no agent protocol.
  const agent = options.agent
  if (agent !== undefined) await serveRecord(raw, () => standInRecord(raw.identity, { name: 'raw', agent }))
  return raw
}

/** Dials the node directly; retried, as libp2p takes only a few new connections per second from one address. */
async function connect (raw: Raw, node: TestNode): Promise<void> {
  const addrs = directAddrs(node)
  await waitFor(async () => {
    try {
      await raw.host.dial(addrs, { signal: AbortSignal.timeout(5_000) })
      return true
    } catch (err) {
      if ((err as Error).message.includes('ECONNRESET') || (err as Error).name === 'AggregateError') return false
      throw err
    }
  }, { what: 'the raw peer to connect' })
}

/** Sends one frame on a new agent stream and returns the last frame of the answer; throws when the node resets it. */
async function exchange (raw: Raw, node: TestNode, frame: unknown): Promise<AgentReplyFrame> {
  const stream = await raw.host.dialProtocol(nodeIDToPeerId(node.nodeID), AGENT_PROTOCOL, { signal: AbortSignal.timeout(5_000) })
  const frames = openFrames(stream, { maxFrameBytes: 1024 * 1024 })
  try {
    await writeMessage(frames, frame)
    await stream.close()
    for (;;) {
      const reply = await readMessage(frames, AgentReplyFrame, { timeoutMs: 20_000 })
      if (reply.type !== 'keepalive') return reply
    }
  } finally {
    stream.abort(new Error('test done'))
  }
}

function message (from: NodeIdentity, to: TestNode, extra: Partial<AgentMessage> = {}): AgentMessage {
  return {
    conversationID: randomUUID(), messageID: randomUUID(), inReplyTo: null, from: from.nodeID, fromName: 'raw peer', to: to.nodeID, content: 'Hello agent', sentAt: new Date().toISOString(), ...extra
  }
}

async function filed (node: TestNode): Promise<unknown> {
  const list = (await node.api.get('/v1/app/agent/conversations')).body.conversations as Array<{ id: string }>
  return await Promise.all(list.map(async (c) => (await node.api.get(`/v1/app/agent/conversations/${c.id}`)).body))
}

test('the agent protocol refuses forged, oversized, misaddressed and injected messages, filing nothing', async (t) => {
  const relay = await startTestRelay(t)
  const node = await startChatNode(t, { network: FAST_NETWORK, agent: { maxAnswerTokens: 8 } })
  assert.equal((await node.api.patch('/v1/app/settings', wanSettings(relay))).status, 200)
  await waitFor(() => node.node.network.relayConnected, { what: 'WAN on at the node' })

  // An honest exchange from a raw peer: answered by the model, signed by the node, filed under the sender's id.
  const alice = await rawPeer(t)
  await connect(alice, node)
  const question = message(alice.identity, node, { fromName: 'Alice (raw)' })
  const envelope = signAgentMessage(alice.identity, question)
  const reply = await exchange(alice, node, envelope)
  assert.equal(reply.type, 'answer', JSON.stringify(reply))
  const answer = openAgentMessage((reply as { envelope: unknown }).envelope, { from: node.nodeID, to: alice.identity.nodeID, inReplyTo: question.messageID })
  assert.equal(answer.conversationID, question.conversationID)
  const conversationID = question.conversationID
  const afterHonest = await filed(node)
  assert.deepEqual(afterHonest, [{
    id: conversationID, peerID: alice.identity.nodeID, peerName: 'Alice (raw)', messageCount: 2, lastMessage: answer.sentAt,
    messages: [
      { id: question.messageID, from: alice.identity.nodeID, role: 'user', content: 'Hello agent', created: question.sentAt },
      { id: answer.messageID, from: node.nodeID, role: 'agent', content: answer.content, created: answer.sentAt }
    ]
  }])

  // The same message again (a retry) gets the same answer and is not filed twice; its id with other content is refused.
  assert.deepEqual(await exchange(alice, node, envelope), reply)
  const reused = await exchange(alice, node, signAgentMessage(alice.identity, { ...question, content: 'Something else' }))
  assert.equal(reused.type, 'error')
  assert.equal((reused as { code: string }).code, 'refused')
  assert.deepEqual(await filed(node), afterHonest)

  // Another peer writing into Alice's conversation is refused; it keeps its connection (a refusal, not a ban).
  const mallory = await rawPeer(t)
  await connect(mallory, node)
  const injected = await exchange(mallory, node, signAgentMessage(mallory.identity, message(mallory.identity, node, { conversationID })))
  assert.deepEqual(injected, { type: 'error', code: 'refused', message: `Conversation ${conversationID} is not one with node ${mallory.identity.nodeID}` })
  assert.deepEqual(await filed(node), afterHonest)
  assert.equal(node.node.network.isBanned(mallory.identity.nodeID), false)

  // Forged: the stream is reset, the sender banned, and nothing is filed. Every kind of forged, oversized,
  // misaddressed or misshapen message, on stream pairs: test/agent/protocol.test.ts.
  const other = identityFromSeed(generateSeed())
  const forgeries: Array<[string, (raw: Raw) => unknown]> = [
    ['signed by another node, in its name', () => signAgentMessage(other, message(other, node))],
    ['content over 32 KiB', (raw) => signEnvelope(raw.identity, { ...message(raw.identity, node), content: 'x'.repeat(32 * 1024 + 1) }, { domain: AGENT_PROTOCOL })]
  ]
  for (const [what, make] of forgeries) {
    const raw = await rawPeer(t)
    await connect(raw, node)
    await assert.rejects(exchange(raw, node, make(raw)), `${what}: refused`)
    await waitFor(() => node.node.network.isBanned(raw.identity.nodeID), { what: `${what}: the sender banned` })
  }
  assert.deepEqual(await filed(node), afterHonest, 'nothing filed')

  // Alice never entered the peer table (she answers no capability fetch): continuing her conversation is a 503.
  const offline = await node.api.post('/v1/app/agent/conversations', { conversationID, message: 'Still there?' })
  assert.equal(offline.status, 503, JSON.stringify(offline.body))
  assert.match(offline.body.error.message, /offline/)
  assert.deepEqual(await filed(node), afterHonest)
})

test('directory from verified records, online then offline; a peer without the agent protocol is unreachable (503)', async (t) => {
  const relay = await startTestRelay(t)
  const node = await startChatNode(t, { network: FAST_NETWORK })
  assert.equal((await node.api.patch('/v1/app/settings', wanSettings(relay))).status, 200)
  await waitFor(() => node.node.network.relayConnected, { what: 'WAN on at the node' })

  const carol = await rawPeer(t, { agent: { name: 'Carol', capabilities: ['Chess', 'poetry'] } })
  const invalid = await rawPeer(t, { agent: { name: 'Bad', capabilities: ['c'.repeat(65)] } })
  const none = await rawPeer(t, { agent: null })
  for (const raw of [carol, invalid, none]) await connect(raw, node)
  await waitFor(() => [carol, invalid, none].every(raw => node.node.network.peer(raw.identity.nodeID) != null), { what: 'the raw peers in the table' })
  const carolEntry = { nodeID: carol.identity.nodeID, name: 'Carol', capabilities: ['Chess', 'poetry'], model: 'some-model', status: 'online' }
  assert.deepEqual((await node.api.get('/v1/app/agent/directory')).body, { agents: [carolEntry] }, 'only a valid agent profile is listed')
  assert.deepEqual((await node.api.get('/v1/app/agent/directory?capability=chess')).body, { agents: [carolEntry] })

  // In the table, but no agent protocol: unreachable, and nothing filed.
  for (const raw of [carol, none]) {
    const res = await node.api.post('/v1/app/agent/conversations', { peerID: raw.identity.nodeID, message: 'Anyone there?' })
    assert.equal(res.status, 503, JSON.stringify(res.body))
    assert.equal(res.body.error.type, 'service_unavailable')
  }
  assert.deepEqual((await node.api.get('/v1/app/agent/conversations')).body, { conversations: [] })
  assert.equal((await node.api.get('/v1/app/agent/profile')).body.model, TINY_MODEL_ID)

  // Carol leaves: still listed, as offline, without a model.
  await carol.host.stop()
  await waitFor(async () => (await node.api.get('/v1/app/agent/directory')).body.agents[0]?.status === 'offline', { what: 'Carol offline' })
  assert.deepEqual((await node.api.get('/v1/app/agent/directory')).body, { agents: [{ ...carolEntry, model: null, status: 'offline' }] })
})
