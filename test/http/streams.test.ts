import { test } from 'node:test'
import assert from 'node:assert/strict'
import { readSse, type SseEvent } from '../../src/cli/sse.ts'
import { startChatNode, TINY_MODEL_ID } from '../support/chat-node.ts'
import { startTestNode, waitFor, type Api } from '../support/node.ts'

/** Opens GET /v1/app/events and reads it in the background; `ended` settles when the node ends the stream. */
async function openEvents (url: string, headers: Record<string, string>): Promise<{ events: SseEvent[], ended: Promise<void> }> {
  const response = await fetch(`${url}/v1/app/events`, { headers })
  assert.equal(response.status, 200)
  const events: SseEvent[] = []
  let connected!: () => void
  const ready = new Promise<void>((resolve) => { connected = resolve })
  const ended = (async () => {
    for await (const event of readSse(response, { onComment: (text) => { if (text === 'connected') connected() } })) events.push(event)
  })()
  await ready
  return { events, ended }
}

async function newKey (api: Api, name: string): Promise<{ id: string, key: string }> {
  const { body } = await api.post('/v1/app/apikeys', { name })
  return body
}

test('an events stream opened with a key ends when the key is revoked; streams of other keys stay open', async (t) => {
  const { api, node } = await startTestNode(t)
  const doomed = await newKey(api, 'doomed')
  const kept = await newKey(api, 'kept')
  assert.equal((await api.patch('/v1/app/settings', { allow_network_access: true })).status, 200)
  const admin = api.withHeaders({ authorization: `Bearer ${node.adminToken}` })

  const revoked = await openEvents(node.url, { authorization: `Bearer ${doomed.key}` })
  const other = await openEvents(node.url, { authorization: `Bearer ${kept.key}` })
  assert.equal(node.http.openStreams.size, 2)
  assert.equal((await admin.post('/v1/app/apikeys/revoke', { id: doomed.id })).status, 200)

  await revoked.ended
  const last = revoked.events.at(-1)
  assert.equal(last?.event, 'error')
  assert.equal(JSON.parse(last?.data ?? '{}').error.code, 'invalid_api_key')
  assert.equal(node.http.openStreams.size, 1, 'the stream of the key not revoked is still open')

  // Switching network access off leaves the loopback stream of a valid key open; back on, it still has its key.
  assert.equal((await admin.patch('/v1/app/settings', { allow_network_access: false })).status, 200)
  assert.equal(node.http.openStreams.size, 1)
  await admin.post('/v1/app/apikeys/revoke', { id: kept.id })
  await other.ended
})

test('switching network access on ends the streams opened without a key', async (t) => {
  const { api, node } = await startTestNode(t)
  const keyless = await openEvents(node.url, {})
  assert.equal((await api.patch('/v1/app/settings', { allow_network_access: true })).status, 200)
  await keyless.ended
  assert.equal(JSON.parse(keyless.events.at(-1)?.data ?? '{}').error.code, 'missing_api_key')
})

test('a chat stream ends when its key is revoked, and its generation stops', async (t) => {
  const { api, node } = await startChatNode(t, { contextSize: 32_768 }, { contextLength: 32_768 })
  const key = await newKey(api, 'chat')
  await api.patch('/v1/app/settings', { allow_network_access: true })
  // Greedy on the tiny model never ends on its own: only the revocation stops it.
  const response = await fetch(`${node.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${key.key}` },
    body: JSON.stringify({ model: TINY_MODEL_ID, messages: [{ role: 'user', content: 'hello' }], max_tokens: 100_000, temperature: 0, stream: true })
  })
  assert.equal(response.status, 200)
  const events: SseEvent[] = []
  const reading = (async () => { for await (const event of readSse(response)) events.push(event) })()
  await waitFor(() => node.engine.stats().busySlots === 1 && events.length > 1, { what: 'generation to stream' })
  await api.post('/v1/app/apikeys/revoke', { id: key.id }, { authorization: `Bearer ${node.adminToken}` })
  await reading
  assert.equal(events.at(-1)?.event, 'error')
  assert.equal(JSON.parse(events.at(-1)?.data ?? '{}').error.type, 'authentication_error')
  await waitFor(() => node.engine.stats().busySlots === 0, { what: 'the generation to stop' })
})
