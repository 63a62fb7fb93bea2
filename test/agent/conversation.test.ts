// The agent's acceptance test on real nodes: two nodes and a relay on loopback, B with the generated tiny model loaded. B's agent
// appears in A's directory; A talks to it; B answers with its model; both nodes file the same conversation; a restart
// keeps it. The CLI drives the same endpoints.
import assert from 'node:assert/strict'
import { execFile } from 'node:child_process'
import { test } from 'node:test'
import { promisify } from 'node:util'
import { startChatNode, TINY_MODEL_ID } from '../support/chat-node.ts'
import { FAST_NETWORK, startTestRelay, startWanNode, waitForPeers, wanSettings } from '../support/network.ts'
import { CLI, waitFor, type Api, type TestNode } from '../support/node.ts'

const run = promisify(execFile)
/** Short answers keep the test fast on two cores; the tiny model never stops on its own. */
const AGENT = { maxAnswerTokens: 16 }

async function meshnode (node: TestNode, args: string[]): Promise<{ stdout: string, stderr: string, code: number }> {
  try {
    const { stdout, stderr } = await run(process.execPath, [CLI, ...args, '--url', node.node.url, '--data-dir', node.dataDir], { env: { ...process.env, MESHNODE_API_KEY: '' } })
    return { stdout, stderr, code: 0 }
  } catch (err) {
    const failed = err as { stdout: string, stderr: string, code: number }
    return { stdout: failed.stdout, stderr: failed.stderr, code: failed.code }
  }
}

async function conversations (api: Api): Promise<Array<{ id: string, peerID: string, peerName: string, messageCount: number, lastMessage: string }>> {
  const res = await api.get('/v1/app/agent/conversations')
  assert.equal(res.status, 200, JSON.stringify(res.body))
  return res.body.conversations
}

test('two nodes and a relay: B\'s agent is in A\'s directory, answers A with its model, and both keep the conversation', async (t) => {
  const relay = await startTestRelay(t)
  const [a, b] = await Promise.all([
    startWanNode(t, relay, { name: 'alice-node', agent: AGENT }),
    startChatNode(t, { name: 'bob-node', network: FAST_NETWORK, agent: AGENT })
  ])
  assert.equal((await b.api.patch('/v1/app/settings', wanSettings(relay))).status, 200)

  const profile = await b.api.patch('/v1/app/agent/profile', { name: ' Bob the translator ', capabilities: ['translation', 'French', 'french'], system_prompt: 'You translate into French.' })
  assert.equal(profile.status, 200, JSON.stringify(profile.body))
  assert.deepEqual(profile.body, {
    nodeID: b.nodeID, name: 'Bob the translator', capabilities: ['translation', 'French'], model: TINY_MODEL_ID, status: 'online', systemPrompt: 'You translate into French.'
  })
  assert.deepEqual((await a.api.get('/v1/app/agent/profile')).body, { nodeID: a.nodeID, name: 'alice-node', capabilities: [], model: null, status: 'online', systemPrompt: '' })

  await Promise.all([waitForPeers(a, [b.nodeID]), waitForPeers(b, [a.nodeID])])
  // The profile reaches A in B's signed capability record, at the latest with the next heartbeat.
  const bob = { nodeID: b.nodeID, name: 'Bob the translator', capabilities: ['translation', 'French'], model: TINY_MODEL_ID, status: 'online' }
  await waitFor(async () => {
    const res = await a.api.get('/v1/app/agent/directory')
    return JSON.stringify(res.body) === JSON.stringify({ agents: [bob] })
  }, { what: 'B in A\'s agent directory' })
  assert.deepEqual((await a.api.get('/v1/app/agent/directory?capability=FRENCH')).body, { agents: [bob] }, 'capability matches ignoring case')
  assert.deepEqual((await a.api.get('/v1/app/agent/directory?capability=cooking')).body, { agents: [] })
  assert.deepEqual((await a.api.get('/v1/app/agent/directory?capability=trans')).body, { agents: [] }, 'a whole capability, not a part')
  await waitFor(async () => (await b.api.get('/v1/app/agent/directory')).body.agents[0]?.name === 'alice-node', { what: 'A in B\'s directory' })

  // A talks to B; B's model answers; both file the exchange under the same conversation id.
  const sent = await a.api.post('/v1/app/agent/conversations', { peerID: b.nodeID, message: 'Hello Bob, what do you know?' })
  assert.equal(sent.status, 200, JSON.stringify(sent.body))
  const { conversation, message, reply } = sent.body
  assert.match(conversation.id, /^[0-9a-f-]{36}$/)
  assert.deepEqual(conversation, { id: conversation.id, peerID: b.nodeID, peerName: 'Bob the translator', messageCount: 2, lastMessage: reply.created })
  assert.deepEqual(message, { id: message.id, from: a.nodeID, role: 'user', content: 'Hello Bob, what do you know?', created: message.created })
  assert.equal(reply.from, b.nodeID)
  assert.equal(reply.role, 'agent')
  assert.ok(reply.content.length > 0, 'the tiny model generated an answer')

  const onA = await conversations(a.api)
  const onB = await conversations(b.api)
  assert.deepEqual(onA, [conversation])
  assert.deepEqual(onB, [{ ...conversation, peerID: a.nodeID, peerName: 'alice-node' }], 'same id, count and time on B')
  const detailA = (await a.api.get(`/v1/app/agent/conversations/${conversation.id}`)).body
  const detailB = (await b.api.get(`/v1/app/agent/conversations/${conversation.id}`)).body
  assert.deepEqual(detailA, { ...conversation, messages: [message, reply] })
  assert.deepEqual(detailB.messages, detailA.messages, 'the same messages on both nodes')

  // Continuing the conversation by its id: the model sees the history, and the count grows on both nodes.
  const more = await a.api.post('/v1/app/agent/conversations', { conversation_id: conversation.id, message: 'And then?' })
  assert.equal(more.status, 200, JSON.stringify(more.body))
  assert.equal(more.body.conversation.messageCount, 4)
  assert.equal((await conversations(b.api))[0].messageCount, 4)
  // Concurrent sends into the conversation: each exchange is filed whole, on both nodes.
  const burst = await Promise.all(['one', 'two', 'three'].map(async (text) => await a.api.post('/v1/app/agent/conversations', { conversationID: conversation.id, message: text })))
  assert.ok(burst.every((r) => r.status === 200), JSON.stringify(burst.map((r) => r.status)))
  assert.equal((await conversations(a.api))[0].messageCount, 10)
  assert.equal((await conversations(b.api))[0].messageCount, 10)

  // B continues it towards A, whose agent has no model: 503, and nothing filed on either side.
  const beforeA = (await a.api.get(`/v1/app/agent/conversations/${conversation.id}`)).body
  const beforeB = (await b.api.get(`/v1/app/agent/conversations/${conversation.id}`)).body
  const noModel = await b.api.post('/v1/app/agent/conversations', { peerID: a.nodeID, conversationID: conversation.id, message: 'Are you there?' })
  assert.equal(noModel.status, 503, JSON.stringify(noModel.body))
  assert.equal(noModel.body.error.type, 'service_unavailable')
  assert.match(noModel.body.error.message, /no model loaded/)
  assert.deepEqual((await a.api.get(`/v1/app/agent/conversations/${conversation.id}`)).body, beforeA)
  assert.deepEqual((await b.api.get(`/v1/app/agent/conversations/${conversation.id}`)).body, beforeB)
  // The conversation is A's with B: naming another peer for it is a conflict.
  const wrongPeer = await a.api.post('/v1/app/agent/conversations', { peerID: a.nodeID.replace(/^./, (c) => c === '0' ? '1' : '0'), conversationID: conversation.id, message: 'x' })
  assert.equal(wrongPeer.status, 409, JSON.stringify(wrongPeer.body))

  // The CLI: profile, directory, conversations, send.
  const cliProfile = await meshnode(a, ['agent', 'profile', '--name', 'Alice', '--capability', 'poetry', '--capability', 'chess'])
  assert.equal(cliProfile.code, 0, cliProfile.stderr)
  assert.match(cliProfile.stdout, /name\s+Alice/)
  assert.match(cliProfile.stdout, /capabilities\s+poetry, chess/)
  const cliDirectory = await meshnode(a, ['agent', 'directory', '--capability', 'translation'])
  assert.equal(cliDirectory.code, 0, cliDirectory.stderr)
  assert.match(cliDirectory.stdout, /Bob the translator/)
  assert.ok(cliDirectory.stdout.includes(b.nodeID))
  const cliSend = await meshnode(a, ['agent', 'send', b.nodeID, 'One more thing', '--conversation', conversation.id, '--json'])
  assert.equal(cliSend.code, 0, cliSend.stderr)
  assert.equal(JSON.parse(cliSend.stdout).conversation.messageCount, 12)
  const cliList = await meshnode(a, ['agent', 'conversations'])
  assert.equal(cliList.code, 0, cliList.stderr)
  assert.match(cliList.stdout, new RegExp(`${conversation.id}.*Bob the translator\\s+12`))
  const cliShow = await meshnode(a, ['agent', 'conversations', conversation.id])
  assert.equal(cliShow.code, 0, cliShow.stderr)
  assert.match(cliShow.stdout, /One more thing/)

  // A restart of A keeps the conversation and its messages.
  const final = (await a.api.get(`/v1/app/agent/conversations/${conversation.id}`)).body
  assert.equal(final.messageCount, 12)
  assert.deepEqual((await b.api.get(`/v1/app/agent/conversations/${conversation.id}`)).body.messages, final.messages)
  const restarted = await a.restart()
  assert.deepEqual(await conversations(restarted.api), [{ id: final.id, peerID: final.peerID, peerName: final.peerName, messageCount: 12, lastMessage: final.lastMessage }])
  assert.deepEqual((await restarted.api.get(`/v1/app/agent/conversations/${conversation.id}`)).body, final)
  assert.equal((await restarted.api.get('/v1/app/agent/profile')).body.name, 'Alice', 'the profile is kept too')
})
