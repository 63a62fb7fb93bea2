// The agent endpoints on one node without peers: the profile (defaults, edits, persistence), empty directory and
// conversations, and every bad input, asserting the envelope and that nothing changed.
import assert from 'node:assert/strict'
import { randomUUID } from 'node:crypto'
import { test } from 'node:test'
import { multiaddr } from '@multiformats/multiaddr'
import { AGENT_PROTOCOL, signAgentMessage } from '../../src/agent/index.ts'
import { generateSeed, identityFromSeed } from '../../src/identity/index.ts'
import { openFrames, writeMessage } from '../../src/wire/index.ts'
import { createPeerHost, nodeIDToPeerId } from '../../src/network/host/libp2p-node.ts'
import { startTestNode, waitFor, type Api, type ApiResponse } from '../support/node.ts'

function assertError (res: ApiResponse, status: number, type: string, param?: string | null): void {
  assert.equal(res.status, status, JSON.stringify(res.body))
  assert.equal(res.body.error.type, type, res.body.error.message)
  if (param !== undefined) assert.equal(res.body.error.param, param, res.body.error.message)
}

async function state (api: Api): Promise<unknown> {
  return {
    profile: (await api.get('/v1/app/agent/profile')).body,
    conversations: (await api.get('/v1/app/agent/conversations')).body,
    directory: (await api.get('/v1/app/agent/directory')).body
  }
}

test('profile: defaults from the node, edits validated, trimmed and kept across a restart', async (t) => {
  const node = await startTestNode(t, { name: 'solo-node' })
  const { api, nodeID } = node
  const defaults = { nodeID, name: 'solo-node', capabilities: [], model: null, status: 'online', systemPrompt: '' }
  assert.deepEqual((await api.get('/v1/app/agent/profile')).body, defaults)
  assert.deepEqual((await api.patch('/v1/app/agent/profile', {})).body, defaults, 'an empty patch changes nothing')

  const bad: Array<[string, unknown, string | null]> = [
    ['empty name', { name: '' }, 'name'],
    ['blank name', { name: '   ' }, 'name'],
    ['long name', { name: 'n'.repeat(129) }, 'name'],
    ['name of the wrong type', { name: 5 }, 'name'],
    ['null name', { name: null }, 'name'],
    ['capabilities as a string', { capabilities: 'chess' }, 'capabilities'],
    ['too many capabilities', { capabilities: Array.from({ length: 33 }, (_, i) => `c${i}`) }, 'capabilities'],
    ['a long capability', { capabilities: ['c'.repeat(65)] }, 'capabilities.0'],
    ['an empty capability', { capabilities: ['chess', ' '] }, 'capabilities.1'],
    ['a capability of the wrong type', { capabilities: [1] }, 'capabilities.0'],
    ['system prompt over 8 KiB', { systemPrompt: 'p'.repeat(8 * 1024 + 1) }, 'systemPrompt'],
    ['system prompt over 8 KiB in bytes', { systemPrompt: '€'.repeat(3000) }, 'systemPrompt'],
    ['system prompt of the wrong type', { systemPrompt: ['x'] }, 'systemPrompt'],
    ['a misspelt key', { nmae: 'typo' }, 'nmae'],
    ['a valid field with an unknown one', { name: 'ok', model: 'x' }, 'model'],
    ['an array body', [{ name: 'x' }], null]
  ]
  for (const [what, body, param] of bad) {
    const res = await api.patch('/v1/app/agent/profile', body)
    assertError(res, 400, 'invalid_request_error')
    if (param != null) assert.equal(res.body.error.param, param, `${what}: ${res.body.error.message}`)
  }
  assertError(await api.send('PATCH', '/v1/app/agent/profile', '{"name":', { 'content-type': 'application/json' }), 400, 'invalid_request_error')
  assert.deepEqual((await api.get('/v1/app/agent/profile')).body, defaults, 'no bad patch changed anything')

  const edited = await api.patch('/v1/app/agent/profile', { name: '  Scribe ', capabilities: [' Poetry', 'poetry', 'chess '], system_prompt: 'Answer in verse.' })
  assert.equal(edited.status, 200, JSON.stringify(edited.body))
  const scribe = { ...defaults, name: 'Scribe', capabilities: ['Poetry', 'chess'], systemPrompt: 'Answer in verse.' }
  assert.deepEqual(edited.body, scribe)
  const limits = await api.patch('/v1/app/agent/profile', { name: 'n'.repeat(128), capabilities: Array.from({ length: 32 }, (_, i) => `c${i}`), systemPrompt: 'é'.repeat(4096) })
  assert.equal(limits.status, 200, 'the limits themselves are accepted')
  assert.deepEqual((await api.patch('/v1/app/agent/profile', { name: scribe.name, capabilities: scribe.capabilities, systemPrompt: scribe.systemPrompt })).body, scribe)
  // The read-only fields of the answer are no patch: refused like any unknown key, so nobody thinks they changed them.
  assertError(await api.patch('/v1/app/agent/profile', scribe), 400, 'invalid_request_error', 'nodeID')

  // Concurrent edits: each is applied whole, and the last one stands.
  const names = Array.from({ length: 10 }, (_, i) => `agent-${i}`)
  const results = await Promise.all(names.map(async (name) => await api.patch('/v1/app/agent/profile', { name })))
  assert.ok(results.every((r) => r.status === 200))
  const finalName = (await api.get('/v1/app/agent/profile')).body.name
  assert.ok(names.includes(finalName))
  assert.deepEqual((await api.get('/v1/app/agent/profile')).body, { ...scribe, name: finalName })

  // The profile is kept; the system prompt is never advertised to peers.
  const restarted = await node.restart()
  assert.deepEqual((await restarted.api.get('/v1/app/agent/profile')).body, { ...scribe, name: finalName })
  assert.deepEqual(restarted.node.network.ownRecord().agent, { name: finalName, capabilities: ['Poetry', 'chess'] })
  assert.deepEqual((await restarted.api.patch('/v1/app/agent/profile', { systemPrompt: '' })).body.systemPrompt, '')
})

test('directory and conversations: empty without peers; every bad send refused and nothing filed', async (t) => {
  const node = await startTestNode(t)
  const { api, nodeID } = node
  assert.deepEqual((await api.get('/v1/app/agent/directory')).body, { agents: [] })
  assert.deepEqual((await api.get('/v1/app/agent/directory?capability=chess')).body, { agents: [] })
  assertError(await api.get('/v1/app/agent/directory?capability='), 400, 'invalid_request_error', 'capability')
  assertError(await api.get(`/v1/app/agent/directory?capability=${'c'.repeat(65)}`), 400, 'invalid_request_error', 'capability')
  assert.deepEqual((await api.get('/v1/app/agent/conversations')).body, { conversations: [] })
  assertError(await api.get(`/v1/app/agent/conversations/${randomUUID()}`), 404, 'not_found')
  assertError(await api.get('/v1/app/agent/conversations/not-a-uuid'), 404, 'not_found')
  assertError(await api.get(`/v1/app/agent/conversations/${'x'.repeat(100)}`), 404, 'not_found')

  const before = await state(api)
  const unknownPeer = 'ab'.repeat(32)
  const bad: Array<[string, unknown, number, string, string | null]> = [
    ['no body fields', {}, 400, 'invalid_request_error', 'message'],
    ['no message', { peerID: unknownPeer }, 400, 'invalid_request_error', 'message'],
    ['an empty message', { peerID: unknownPeer, message: '' }, 400, 'invalid_request_error', 'message'],
    ['a message of the wrong type', { peerID: unknownPeer, message: 42 }, 400, 'invalid_request_error', 'message'],
    ['a lone surrogate', { peerID: unknownPeer, message: 'a\ud800b' }, 400, 'invalid_request_error', 'message'],
    ['no peer and no conversation', { message: 'hello' }, 400, 'invalid_request_error', 'peerID'],
    ['a peerID of the wrong type', { peerID: 5, message: 'hello' }, 400, 'invalid_request_error', 'peerID'],
    ['a peerID that is no nodeID', { peerID: 'bob', message: 'hello' }, 400, 'invalid_request_error', 'peerID'],
    ['this node itself', { peerID: nodeID, message: 'hello' }, 400, 'invalid_request_error', 'peerID'],
    ['a malformed peerID with a conversation', { peerID: 'bob', conversationID: randomUUID(), message: 'hello' }, 400, 'invalid_request_error', 'peerID'],
    ['an unknown peer', { peerID: unknownPeer, message: 'hello' }, 404, 'not_found', null],
    ['an unknown peer by its snake_case name', { peer_id: unknownPeer, message: 'hello' }, 404, 'not_found', null],
    ['an unknown conversation', { conversationID: randomUUID(), message: 'hello' }, 404, 'not_found', null],
    ['a conversationID of the wrong type', { conversationID: 7, message: 'hello' }, 400, 'invalid_request_error', 'conversationID'],
    ['a message over 32 KiB', { peerID: unknownPeer, message: 'm'.repeat(40 * 1024) }, 413, 'request_too_large', null],
    ['a message over 32 KiB in bytes', { peerID: unknownPeer, message: '€'.repeat(11_000) }, 413, 'request_too_large', null],
    ['a body over 1 MiB', { peerID: unknownPeer, message: 'm'.repeat(1024 * 1024) }, 413, 'request_too_large', null]
  ]
  for (const [what, body, status, type, param] of bad) {
    const res = await api.post('/v1/app/agent/conversations', body)
    assert.equal(res.status, status, `${what}: ${JSON.stringify(res.body).slice(0, 300)}`)
    assert.equal(res.body.error.type, type, what)
    if (param != null) assert.equal(res.body.error.param, param, `${what}: ${res.body.error.message}`)
  }
  // Exactly 32 KiB passes the size check (and then meets the unknown peer).
  assertError(await api.post('/v1/app/agent/conversations', { peerID: unknownPeer, message: 'm'.repeat(32 * 1024) }), 404, 'not_found')
  assertError(await api.send('POST', '/v1/app/agent/conversations', '{"peerID":', { 'content-type': 'application/json' }), 400, 'invalid_request_error')
  const concurrent = await Promise.all(Array.from({ length: 8 }, async () => await api.post('/v1/app/agent/conversations', { peerID: unknownPeer, message: 'hi' })))
  assert.ok(concurrent.every((r) => r.status === 404))
  assert.deepEqual(await state(api), before, 'nothing changed')
})

test('a node that is no peer (not admitted to the LAN cluster, no WAN) cannot open the agent protocol: nothing is filed', async (t) => {
  const node = await startTestNode(t)
  // The cluster on, with a passcode the stranger cannot prove: the node listens, but does not admit it.
  await node.api.patch('/v1/app/settings', { cluster_enabled: true, cluster_passcode: 'only-for-members' })
  await waitFor(() => node.node.network.addresses().length > 0, { what: 'the peer network to start' })
  const stranger = identityFromSeed(generateSeed())
  const host = await createPeerHost(stranger, { listen: ['/ip4/127.0.0.1/tcp/0'] })
  t.after(() => host.stop())
  await host.dial(node.node.network.addresses().filter((a) => a.includes('/tcp/') && !a.includes('/ws')).map((a) => multiaddr(a)))
  const envelope = signAgentMessage(stranger, {
    conversationID: randomUUID(), messageID: randomUUID(), inReplyTo: null, from: stranger.nodeID, fromName: 'stranger', to: node.nodeID, content: 'let me in', sentAt: new Date().toISOString()
  })
  await assert.rejects(async () => {
    const stream = await host.dialProtocol(nodeIDToPeerId(node.nodeID), AGENT_PROTOCOL, { signal: AbortSignal.timeout(5_000) })
    const frames = openFrames(stream)
    await writeMessage(frames, envelope)
    await stream.close()
    await frames.lp.read({ signal: AbortSignal.timeout(5_000) })
  })
  assert.deepEqual((await node.api.get('/v1/app/agent/conversations')).body, { conversations: [] })
})
