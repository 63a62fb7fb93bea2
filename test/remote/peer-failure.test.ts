// A peer that fails after its first token: the answer already started, so there is no failover; the client gets the
// token, then an error in the stream's own terms, and the node goes on serving. The peer is a stand-in that speaks the
// infer protocol's 1.0.0 (plain chats, as nodes before 1.1.0 do) exactly up to its first delta, then resets the stream.
import assert from 'node:assert/strict'
import { test } from 'node:test'
import { INFER_PROTOCOL_CHAT, InferRequest } from '../../src/remote/infer.ts'
import { readRequest, writeMessage } from '../../src/wire/index.ts'
import { collectSse } from '../support/chat-node.ts'
import { startTestRelay, startWanNode } from '../support/network.ts'
import { waitFor } from '../support/node.ts'
import { directAddrs, serveRecord, standInHost, standInRecord } from '../support/stand-in.ts'

const MODEL = 'stand-in-model'

test('a peer that fails after its first token: the client gets the token, then an error; no failover; the node serves on', async (t) => {
  const relay = await startTestRelay(t)
  const node = await startWanNode(t, relay)
  await waitFor(() => node.node.network.relayConnected, { what: 'WAN on' })

  const peer = await standInHost(t)
  await serveRecord(peer, () => standInRecord(peer.identity, { models: { loaded: MODEL, downloaded: [MODEL] }, capacity: { slots: 4, busySlots: 0, queued: 0, reservedSlots: 0 } }))
  let asked = 0
  await peer.host.handle(INFER_PROTOCOL_CHAT, async (stream) => {
    asked++
    const { frames } = await readRequest(stream, InferRequest, { maxRequestBytes: 2 * 1024 * 1024, timeoutMs: 5_000 })
    await writeMessage(frames, { type: 'delta', text: 'Once' })
    stream.abort(new Error('the stand-in dies after its first token'))
  }, { runOnLimitedConnection: true })
  await peer.host.dial(directAddrs(node))
  await waitFor(() => node.node.network.peer(peer.identity.nodeID)?.record.models.loaded === MODEL, { what: 'the peer in the table with its model' })

  const streamed = await fetch(`${node.node.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'Tell me a story.' }], stream: true })
  })
  assert.equal(streamed.status, 200)
  assert.equal(streamed.headers.get('x-served-by'), `peer:${peer.identity.nodeID}`)
  const { data } = await collectSse(streamed)
  const content = data.slice(0, -2).map((line) => (JSON.parse(line) as { choices: Array<{ delta: { content?: string } }> }).choices[0]?.delta.content ?? '').join('')
  assert.equal(content, 'Once', 'the token the peer sent reached the client')
  const error = JSON.parse(data.at(-2) ?? '{}') as { error?: { type: string, message: string } }
  assert.equal(error.error?.type, 'service_unavailable')
  assert.match(error.error?.message ?? '', /failed while answering/)
  assert.equal(data.at(-1), '[DONE]')

  const plain = await node.api.post('/v1/chat/completions', { model: MODEL, messages: [{ role: 'user', content: 'Again?' }] })
  assert.equal(plain.status, 503, JSON.stringify(plain.body))
  assert.match(plain.body.error.message, /failed while answering/)
  assert.equal(asked, 2, 'each request went to the peer once: no failover after the first token')

  // A request only 1.1.0 carries (tools) is refused by this older peer when the stream opens: a 503 naming it, no work.
  const tools = await node.api.post('/v1/chat/completions', {
    model: MODEL, messages: [{ role: 'user', content: 'Weather?' }], tools: [{ type: 'function', function: { name: 'get_weather' } }]
  })
  assert.equal(tools.status, 503, JSON.stringify(tools.body))
  assert.match(tools.body.error.message, new RegExp(peer.identity.nodeID.slice(0, 16)))
  assert.equal(asked, 2, 'the older peer never saw it')
  assert.equal((await node.api.get('/health')).status, 200)
  assert.equal(node.node.network.isBanned(peer.identity.nodeID), false, 'a reset is no offence')
})
