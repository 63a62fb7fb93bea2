import { test } from 'node:test'
import assert from 'node:assert/strict'
import Anthropic from '@anthropic-ai/sdk'
import OpenAI from 'openai'
import type { ResponseStreamEvent } from 'openai/resources/responses/responses'
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

test('a cut stream ends in its dialect: Anthropic\'s error event on /v1/messages, an error event numbered in turn on /v1/responses', async (t) => {
  const { api, node } = await startChatNode(t, { contextSize: 32_768 }, { contextLength: 32_768 })
  const admin = api.withHeaders({ authorization: `Bearer ${node.adminToken}` })
  const claudeKey = await newKey(api, 'claude-code')
  const codexKey = await newKey(api, 'codex')
  await api.patch('/v1/app/settings', { allow_network_access: true })
  // Greedy on the tiny model never ends on its own: only the revocation stops each stream
  const generating = async (): Promise<void> => { await waitFor(() => node.engine.stats().busySlots === 1, { what: 'generation to stream' }) }

  const anthropic = new Anthropic({ baseURL: node.url, apiKey: claudeKey.key, maxRetries: 0, timeout: 300_000 })
  const message = anthropic.messages.stream({ model: TINY_MODEL_ID, max_tokens: 100_000, temperature: 0, messages: [{ role: 'user', content: 'hello' }] })
  const { response } = await message.withResponse()
  await generating()
  await admin.post('/v1/app/apikeys/revoke', { id: claudeKey.id })
  await assert.rejects(message.finalMessage(), (err: unknown) => {
    assert.ok(err instanceof Anthropic.APIError, String(err))
    assert.equal(err.type, 'authentication_error')
    assert.deepEqual(err.error, { type: 'error', error: { type: 'authentication_error', message: `API key ${claudeKey.id} was revoked` }, request_id: response.headers.get('request-id') })
    return true
  })
  await waitFor(() => node.engine.stats().busySlots === 0, { what: 'the generation to stop' })

  const openai = new OpenAI({ baseURL: `${node.url}/v1`, apiKey: codexKey.key, maxRetries: 0, timeout: 300_000 })
  const events: ResponseStreamEvent[] = []
  const stream = await openai.responses.create({ model: TINY_MODEL_ID, input: 'hello', temperature: 0, stream: true })
  const reading = (async () => { for await (const event of stream) events.push(event) })()
  await waitFor(() => node.engine.stats().busySlots === 1 && events.some((event) => event.type === 'response.output_text.delta'), { what: 'generation to stream' })
  await admin.post('/v1/app/apikeys/revoke', { id: codexKey.id })
  await reading
  const last = events.at(-1)
  assert.deepEqual(last, { type: 'error', code: 'invalid_api_key', message: `API key ${codexKey.id} was revoked`, param: null, sequence_number: events.length - 1 })
  assert.deepEqual(events.map((event) => event.sequence_number), events.map((_, i) => i), 'every event is numbered in turn, the last one too')
})

test('streams carry X-Request-Id as every other answer does, and Anthropic\'s request-id on its routes', async (t) => {
  const { node, openai } = await startChatNode(t)
  const uuid = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/
  const { data: chat, response } = await openai.chat.completions.create({ model: TINY_MODEL_ID, messages: [{ role: 'user', content: 'hello' }], max_tokens: 2, stream: true }).withResponse()
  for await (const chunk of chat) assert.ok(chunk.object === 'chat.completion.chunk')
  assert.match(response.headers.get('x-request-id') ?? '', uuid)
  assert.equal(response.headers.get('request-id'), null, 'request-id is Anthropic\'s, on its routes only')

  const anthropic = new Anthropic({ baseURL: node.url, apiKey: 'unused', maxRetries: 0, timeout: 300_000 })
  const { response: message } = await anthropic.messages.stream({ model: TINY_MODEL_ID, max_tokens: 2, messages: [{ role: 'user', content: 'hello' }] }).withResponse()
  assert.match(message.headers.get('x-request-id') ?? '', uuid)
  assert.equal(message.headers.get('request-id'), message.headers.get('x-request-id'))

  const events = await fetch(`${node.url}/v1/app/events`)
  assert.match(events.headers.get('x-request-id') ?? '', uuid)
  await events.body?.cancel()
})
