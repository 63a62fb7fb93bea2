import { test } from 'node:test'
import assert from 'node:assert/strict'
import { join } from 'node:path'
import { startTestNode, tempDir, waitFor } from '../support/node.ts'
import { FAST_NETWORK, startTestRelay, waitForPeers, wanSettings } from '../support/network.ts'
import { writeTinyGguf } from '../support/tiny-gguf.ts'

const MODEL = 'tiny-chat'
const hello = [{ role: 'user' as const, content: 'Tell me a story about a cat.' }]

test('org_capacity_reservation keeps slots for PTN members: outsiders get 429 beyond their share, members still run', async (t) => {
  const relay = await startTestRelay(t)
  const { path } = await writeTinyGguf(join(await tempDir(t, 'meshnode-model-'), 'tiny.gguf'), { seed: 7, contextLength: 4096 })
  const server = await startTestNode(t, { network: FAST_NETWORK, slots: 2, contextSize: 4096 })
  await server.node.engine.load(MODEL, path)
  // Half of two slots is kept for members: outsiders may use one.
  assert.equal((await server.api.patch('/v1/app/settings', { ...wanSettings(relay), org_capacity_reservation: 0.5 })).status, 200)
  const [outsider, member] = await Promise.all([0, 1].map(async () => {
    const node = await startTestNode(t, { network: FAST_NETWORK })
    await node.api.patch('/v1/app/settings', wanSettings(relay))
    return node
  }))
  await Promise.all([waitForPeers(outsider, [server.nodeID]), waitForPeers(member, [server.nodeID]), waitForPeers(server, [member.nodeID])])

  // The member joins the server's PTN; the server sees its certificate in its next record.
  const { ptnID } = (await server.api.post('/v1/app/ptn/create', { name: 'org' })).body
  const { certData } = (await server.api.post('/v1/app/ptn/issue-cert', { ptnID, nodeID: member.nodeID })).body
  assert.equal((await member.api.post('/v1/app/ptn/join-with-cert', { certData })).status, 200)
  await waitFor(() => server.node.network.peer(member.nodeID)?.ptnIDs.includes(ptnID), { what: 'the server to see the member\'s PTN' })
  const peerView = (await server.api.get('/v1/app/peers')).body.peers.find((p: { nodeID: string }) => p.nodeID === member.nodeID)
  assert.deepEqual(peerView.ptnIDs, [ptnID])

  // The outsider's first request takes the one open slot and keeps it.
  const holder = new AbortController()
  t.after(() => { holder.abort() })
  const held = fetch(`${outsider.node.url}/v1/chat/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' }, signal: holder.signal,
    body: JSON.stringify({ model: MODEL, messages: hello, max_tokens: 4000, temperature: 0, stream: true })
  }).then(async res => { await res.text() }).catch(() => undefined)
  await waitFor(() => server.node.engine.stats().busySlots === 1, { what: 'the outsider\'s request to run' })

  const refused = await outsider.api.post('/v1/chat/completions', { model: MODEL, messages: hello, max_tokens: 2 })
  assert.equal(refused.status, 429)
  assert.equal(refused.body.error.type, 'rate_limit_error')
  assert.ok(Number(refused.headers.get('retry-after')) >= 1)

  const served = await member.api.post('/v1/chat/completions', { model: MODEL, messages: hello, max_tokens: 2 })
  assert.equal(served.status, 200, JSON.stringify(served.body))
  assert.equal(served.headers.get('x-served-by'), `peer:${server.nodeID}`)
  assert.equal(served.body.usage.completion_tokens, 2)
  holder.abort()
  await held
})
