import { test } from 'node:test'
import assert from 'node:assert/strict'
import { join } from 'node:path'
import OpenAI from 'openai'
import { readSse } from '../../src/cli/sse.ts'
import { tempDir, waitFor, type TestNode } from '../support/node.ts'
import { FAST_NETWORK, startTestRelay, waitForPeers } from '../support/network.ts'
import { metric, startPeer } from '../support/peers.ts'
import { writeTinyGguf } from '../support/tiny-gguf.ts'

const MODEL = 'tiny-chat'
const SERVED = 'meshnode_peer_requests_served_total'
const hello = [{ role: 'user' as const, content: 'Tell me a story about a cat.' }]

function openaiFor (node: TestNode): OpenAI {
  return new OpenAI({ baseURL: `${node.node.url}/v1`, apiKey: 'sk-local-dummy', maxRetries: 0, timeout: 60_000 })
}

test('three nodes and a relay: discovery, the peers API, remote streamed inference through the openai client, failover', async (t) => {
  const relay = await startTestRelay(t)
  // A long context lets a serving peer's one slot stay busy for a while (the tiny model never stops on its own).
  const { path } = await writeTinyGguf(join(await tempDir(t, 'meshnode-model-'), 'tiny.gguf'), { seed: 7, contextLength: 4096 })
  // B and C push a change of their load alone only after ten minutes, and A measures their latency once, on purpose:
  // A's view of their load and latency stays what it saw first, so it keeps choosing the same peer even while that
  // peer's only slot is taken; that is how the test makes the first chosen peer hold a request. Which of B and C that
  // is depends on the measured latencies (then on price), so the test asks.
  const servers = { slots: 1, contextSize: 4096, network: { ...FAST_NETWORK, loadPushIntervalMs: 600_000 } }
  const a = await startPeer(t, relay, { config: { network: { ...FAST_NETWORK, pingIntervalMs: 600_000 } } })
  const b = await startPeer(t, relay, { model: { id: MODEL, path }, settings: { electricity_cost: 0 }, config: servers })
  const c = await startPeer(t, relay, { model: { id: MODEL, path }, settings: { electricity_cost: 1000 }, config: servers })
  await Promise.all([waitForPeers(a, [b.nodeID, c.nodeID]), waitForPeers(b, [a.nodeID, c.nodeID]), waitForPeers(c, [a.nodeID, b.nodeID])])
  const openai = openaiFor(a)
  // A peer is listed once its record is in; its latency follows the first ping that gets through (a first one can
  // go down with a duplicate connection the two nodes close). The best peer is read once both are measured: until
  // then it is ranked without its latency, and may not be the one chosen after.
  const listedWithLatencies = await waitFor(async () => {
    const listed = await a.api.get('/v1/app/peers')
    const peers = listed.body.peers as Array<{ latencyMs: unknown }>
    return peers.length === 2 && peers.every(peer => typeof peer.latencyMs === 'number') ? listed : undefined
  }, { what: 'both peers to have a measured latency' })
  // /v1/models names the best peer for each model: the one requests go to first.
  const bestOwner = (await openai.models.list()).data[0]?.owned_by
  const [first, second] = bestOwner === `peer:${b.nodeID}` ? [b, c] : [c, b]

  await t.test('GET /v1/app/peers, the snapshot counts and /v1/models list the peers and their models', async () => {
    const res = listedWithLatencies
    assert.equal(res.status, 200)
    const peers = res.body.peers as Array<Record<string, any>> // eslint-disable-line @typescript-eslint/no-explicit-any
    assert.deepEqual(peers.map(p => p.nodeID).sort(), [b.nodeID, c.nodeID].sort())
    for (const peer of peers) {
      assert.deepEqual(Object.keys(peer).sort(), ['capacity', 'connected', 'connection', 'hardware', 'lastSeen', 'latencyMs', 'model', 'models', 'name', 'nodeID', 'pricePer1kTokens', 'ptnIDs', 'status', 'type'])
      assert.equal(peer.type, 'wan')
      assert.equal(peer.connection, 'direct', 'on one machine the nodes dial each other directly')
      assert.equal(peer.status, 'online')
      assert.equal(peer.model, MODEL)
      assert.deepEqual(peer.models, [MODEL])
      assert.equal(peer.name, `meshnode-${peer.nodeID.slice(0, 8)}`)
      assert.deepEqual(Object.keys(peer.hardware).sort(), ['cpu', 'gpu', 'memoryGB'])
      assert.equal(typeof peer.latencyMs, 'number')
      assert.ok(!Number.isNaN(Date.parse(peer.lastSeen)) && peer.lastSeen.endsWith('Z'))
      assert.deepEqual(peer.ptnIDs, [])
      assert.ok(peer.pricePer1kTokens > 0)
    }
    const price = (id: string): number => peers.find(p => p.nodeID === id)?.pricePer1kTokens
    assert.ok(price(b.nodeID) < price(c.nodeID), 'B advertises the lower price')

    assert.deepEqual((await a.api.get('/v1/app')).body.peers, { lan: 0, wan: 2 })
    const models = await openai.models.list()
    assert.deepEqual(models.data.map(m => [m.id, m.owned_by]), [[MODEL, `peer:${first.nodeID}`]])
    // B lists its own model as local, and C's (the same model) not again.
    const bModels = await openaiFor(b).models.list()
    assert.deepEqual(bModels.data.map(m => [m.id, m.owned_by]), [[MODEL, 'local']])
  })

  await t.test('a node with no model streams an answer served by the best peer, token by token, with real usage', async () => {
    const [firstBefore, secondBefore] = [await metric(first.api, SERVED), await metric(second.api, SERVED)]
    const { data: stream, response } = await openai.chat.completions.create({
      model: MODEL, messages: hello, max_tokens: 8, temperature: 0, stream: true, stream_options: { include_usage: true }
    }).withResponse()
    assert.equal(response.headers.get('x-served-by'), `peer:${first.nodeID}`)
    const chunks: OpenAI.Chat.Completions.ChatCompletionChunk[] = []
    for await (const chunk of stream) chunks.push(chunk)
    assert.deepEqual(chunks[0].choices[0].delta, { role: 'assistant', content: '' })
    assert.ok(chunks.filter(c => (c.choices[0]?.delta.content ?? '') !== '').length >= 2, 'several content deltas')
    assert.equal(chunks.find(c => c.choices[0]?.finish_reason != null)?.choices[0].finish_reason, 'length')
    assert.equal(chunks.at(-1)?.usage?.completion_tokens, 8)
    const streamed = chunks.map(c => c.choices[0]?.delta.content ?? '').join('')

    // The same request run locally on the peer gives the same text: the peer path changes nothing in the answer.
    const local = await openaiFor(first).chat.completions.create({ model: MODEL, messages: hello, max_tokens: 8, temperature: 0 })
    assert.equal(streamed, local.choices[0].message.content)
    const { response: plain } = await openai.chat.completions.create({ model: MODEL, messages: hello, max_tokens: 3 }).withResponse()
    assert.equal(plain.headers.get('x-served-by'), `peer:${first.nodeID}`)
    assert.equal(await metric(first.api, SERVED), firstBefore + 2, 'the streamed and the plain request, not the local one')
    assert.equal(await metric(second.api, SERVED), secondBefore)
  })

  await t.test('a model neither here nor on a peer is a 404 naming it, with where to see the models there are', async () => {
    const before = await metric(first.api, SERVED)
    await assert.rejects(openai.chat.completions.create({ model: 'no-such-model', messages: hello, max_tokens: 3 }), (err: unknown) => {
      assert.ok(err instanceof OpenAI.NotFoundError)
      assert.equal(err.status, 404)
      assert.match(err.message, /no-such-model.*no peer serves it.*`meshnode models list` shows/)
      return true
    })
    assert.equal(await metric(first.api, SERVED), before)
  })

  await t.test('the first chosen peer is killed before it answers: the request fails over to the next peer', async () => {
    // Take the first peer's only slot with a long local generation, so A's request waits in its queue.
    const holder = new AbortController()
    const held = fetch(`${first.node.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, messages: hello, max_tokens: 4000, temperature: 0, stream: true }),
      signal: holder.signal
    }).then(async res => { await res.text() }).catch(() => undefined)
    t.after(() => { holder.abort() })
    await waitFor(() => first.node.engine.stats().busySlots === 1, { what: 'the first peer busy with its own request' })

    const secondBefore = await metric(second.api, SERVED)
    const response = await fetch(`${a.node.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, messages: hello, max_tokens: 6, temperature: 0, stream: true, stream_options: { include_usage: true } })
    })
    // The stream opened while the request waits at the first peer, naming it; the failover before the first token
    // is announced by a `served-by` comment, so the last node named is the one that answered.
    assert.equal(response.status, 200)
    const named = [response.headers.get('x-served-by')]
    assert.deepEqual(named, [`peer:${first.nodeID}`])
    const answer = (async () => {
      let text = ''
      let usage: OpenAI.CompletionUsage | null | undefined = null
      for await (const { data } of readSse(response, { onComment: (comment) => { if (comment.startsWith('served-by ')) named.push(comment.slice(10)) } })) {
        if (data === '[DONE]') continue
        const chunk = JSON.parse(data) as OpenAI.Chat.Completions.ChatCompletionChunk
        text += chunk.choices[0]?.delta.content ?? ''
        usage = chunk.usage ?? usage
      }
      return { text, usage }
    })()
    await waitFor(() => first.node.engine.stats().queued === 1, { what: 'A\'s request to be waiting at the first peer' })
    // Kill the first peer: its peer network goes first (every connection to it drops), then the rest of the node.
    await first.node.network.stop()
    holder.abort()
    await first.node.close()
    await held

    const { text, usage } = await answer
    assert.ok(text.length > 0)
    assert.deepEqual(named, [`peer:${first.nodeID}`, `peer:${second.nodeID}`], 'the last node named is the peer that answered, after failover')
    assert.equal(usage?.completion_tokens, 6)
    assert.equal(await metric(second.api, SERVED), secondBefore + 1, 'the second peer answered it')
    await waitFor(() => !a.node.network.isKnownPeer(first.nodeID), { what: 'A to drop the killed peer' })
    assert.deepEqual((await a.api.get('/v1/app/peers')).body.peers.map((p: { nodeID: string }) => p.nodeID), [second.nodeID])
    const next = await openai.chat.completions.create({ model: MODEL, messages: hello, max_tokens: 2 }).withResponse()
    assert.equal(next.response.headers.get('x-served-by'), `peer:${second.nodeID}`)
  })
})

test('WAN: the relay restarts mid-test and the nodes find each other again; WAN off and on takes effect at once', async (t) => {
  const relay = await startTestRelay(t)
  // No direct listen addresses: the only way between them is through the relay.
  const [a, b] = await Promise.all([0, 1].map(async () => await startPeer(t, relay, { config: { p2pListen: [] } })))
  await Promise.all([waitForPeers(a, [b.nodeID]), waitForPeers(b, [a.nodeID])])
  assert.ok(a.node.network.host.getConnections().every(conn => conn.remoteAddr.toString().includes('/p2p-circuit') || conn.remoteAddr.toString().includes(relay.relay.peerId.toString())))

  await t.test('relay restart', async () => {
    const lost: string[] = []
    a.node.network.on('peer:offline', (nodeID) => { lost.push(nodeID) })
    await relay.relay.stop()
    await waitFor(() => lost.includes(b.nodeID), { what: 'A to lose B with the relay' })
    await relay.restart()
    await Promise.all([waitForPeers(a, [b.nodeID]), waitForPeers(b, [a.nodeID])])
    assert.deepEqual(new Set(relay.relay.directory.list().map(r => r.signer)), new Set([a.nodeID, b.nodeID]))
  })

  await t.test('WAN off drops the peers at once; on again finds them', async () => {
    const res = await a.api.patch('/v1/app/settings', { wan_enabled: false })
    assert.equal(res.status, 200)
    await waitFor(async () => (await a.api.get('/v1/app/peers')).body.peers.length === 0, { what: 'A to have no peers' })
    await waitFor(() => !b.node.network.isKnownPeer(a.nodeID), { what: 'B to lose A' })
    assert.deepEqual((await a.api.get('/v1/app')).body.peers, { lan: 0, wan: 0 })
    assert.equal(a.node.network.relayConnected, false)
    await a.api.patch('/v1/app/settings', { wan_enabled: true })
    await Promise.all([waitForPeers(a, [b.nodeID]), waitForPeers(b, [a.nodeID])])
  })
})
