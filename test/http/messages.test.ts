// Anthropic's Messages API, through the official Anthropic SDK against a real node with the tiny GGUF: the answers,
// the stream's events in Anthropic's order, tools, count_tokens, and errors in Anthropic's shape.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { readFile } from 'node:fs/promises'
import { join } from 'node:path'
import Anthropic from '@anthropic-ai/sdk'
import { anthropicError } from '../../src/http/errors.ts'
import { startChatNode, TINY_MODEL_ID } from '../support/chat-node.ts'
import { waitFor } from '../support/node.ts'
import { assertValidArguments, WEATHER } from '../support/tools.ts'

const hello = [{ role: 'user' as const, content: 'Hello there' }]
const weatherTool: Anthropic.Tool = { name: WEATHER.function.name, description: WEATHER.function.description, input_schema: WEATHER.function.parameters as Anthropic.Tool.InputSchema }

function anthropicFor (url: string, apiKey = 'sk-ant-unused-while-network-access-is-off'): Anthropic {
  return new Anthropic({ baseURL: url, apiKey, maxRetries: 0, timeout: 300_000 })
}

test('create and stream: Anthropic\'s shapes and event order; finalMessage assembles the stream', async (t) => {
  const { node } = await startChatNode(t, {}, { contextLength: 4096 })
  const client = anthropicFor(node.url)
  const { data: message, response } = await client.messages.create({ model: TINY_MODEL_ID, max_tokens: 12, system: 'Be brief.', messages: hello }).withResponse()
  assert.equal(response.headers.get('x-served-by'), 'local')
  assert.match(message.id, /^msg_/)
  assert.equal(message.type, 'message')
  assert.equal(message.role, 'assistant')
  assert.equal(message.model, TINY_MODEL_ID)
  assert.equal(message.content.length, 1)
  assert.equal(message.content[0].type, 'text')
  assert.equal(message.stop_reason, 'max_tokens')
  assert.equal(message.stop_sequence, null)
  assert.equal(message.usage.output_tokens, 12)
  assert.ok(message.usage.input_tokens > 0)
  assert.equal(message.usage.cache_creation_input_tokens, 0)

  const stream = client.messages.stream({ model: TINY_MODEL_ID, max_tokens: 12, messages: [{ role: 'user', content: [{ type: 'text', text: 'Tell me more' }] }] })
  const events: Anthropic.RawMessageStreamEvent[] = []
  for await (const event of stream) events.push(event)
  const final = await stream.finalMessage()
  const types = events.map((e) => e.type)
  assert.equal(types[0], 'message_start')
  assert.equal(types[1], 'content_block_start')
  assert.deepEqual(types.slice(-3), ['content_block_stop', 'message_delta', 'message_stop'])
  assert.ok(types.slice(2, -3).every((type) => type === 'content_block_delta'), types.join(','))
  const streamed = events.flatMap((e) => e.type === 'content_block_delta' && e.delta.type === 'text_delta' ? [e.delta.text] : []).join('')
  assert.equal(final.content.length, 1)
  assert.ok(final.content[0].type === 'text' && final.content[0].text === streamed, JSON.stringify(final.content))
  assert.equal(final.stop_reason, 'max_tokens')
  assert.equal(final.usage.output_tokens, 12)

  // A stop sequence the answer reaches ends it there, and is named
  const stopped = await client.messages.create({ model: TINY_MODEL_ID, max_tokens: 64, messages: hello, stop_sequences: [' '] })
  assert.equal(stopped.stop_reason, 'stop_sequence')
  assert.equal(stopped.stop_sequence, ' ')
  assert.ok(!(stopped.content[0]?.type === 'text' && stopped.content[0].text.includes(' ')))
})

test('tool_choice tool: a tool_use block valid against input_schema, streamed and not; a tool_result round trip', async (t) => {
  const { node } = await startChatNode(t, {}, { contextLength: 4096 })
  const client = anthropicFor(node.url)
  const forced = { model: TINY_MODEL_ID, max_tokens: 200, messages: [{ role: 'user' as const, content: 'Weather in Paris?' }], tools: [weatherTool], tool_choice: { type: 'tool' as const, name: 'get_weather' } }
  const answer = await client.messages.create(forced)
  assert.equal(answer.stop_reason, 'tool_use')
  const call = answer.content.find((block) => block.type === 'tool_use')
  assert.ok(call != null && call.type === 'tool_use', JSON.stringify(answer.content))
  assert.equal(call.name, 'get_weather')
  assertValidArguments('get_weather', JSON.stringify(call.input))

  const stream = client.messages.stream(forced)
  const deltas: string[] = []
  for await (const event of stream) if (event.type === 'content_block_delta' && event.delta.type === 'input_json_delta') deltas.push(event.delta.partial_json)
  const final = await stream.finalMessage()
  assert.equal(final.stop_reason, 'tool_use')
  const streamedCall = final.content.find((block) => block.type === 'tool_use')
  assert.ok(streamedCall != null && streamedCall.type === 'tool_use')
  assert.deepEqual(streamedCall.input, JSON.parse(deltas.join('')))
  assertValidArguments('get_weather', JSON.stringify(streamedCall.input))

  // The call and its result go back; the model answers in text
  const history: Anthropic.MessageParam[] = [...forced.messages, { role: 'assistant', content: [{ type: 'tool_use', id: call.id, name: call.name, input: call.input }] }]
  const result: Anthropic.MessageParam = { role: 'user', content: [{ type: 'tool_result', tool_use_id: call.id, content: [{ type: 'text', text: 'Sunny, 21 degrees' }] }, { type: 'text', text: 'And tomorrow?' }] }
  const followUp = await client.messages.create({ model: TINY_MODEL_ID, max_tokens: 8, tools: [weatherTool], tool_choice: { type: 'none' }, messages: [...history, result] })
  assert.equal(followUp.content[0]?.type, 'text')
  const shorterResult: Anthropic.MessageParam = { role: 'user', content: [{ type: 'tool_result', tool_use_id: call.id, content: 'ok' }, { type: 'text', text: 'And tomorrow?' }] }
  const shorter = await client.messages.countTokens({ model: TINY_MODEL_ID, tools: [weatherTool], tool_choice: { type: 'none' }, messages: [...history, shorterResult] })
  assert.ok(followUp.usage.input_tokens + (followUp.usage.cache_read_input_tokens ?? 0) > shorter.input_tokens, 'the tool result was read')
})

test('count_tokens is the input a request is billed; server tools are left out by name; refusals in Anthropic\'s shape', async (t) => {
  const { node, api } = await startChatNode(t, {}, { contextLength: 4096 })
  const client = anthropicFor(node.url)
  const request = { model: TINY_MODEL_ID, system: [{ type: 'text' as const, text: 'You answer weather questions.' }], messages: [{ role: 'user' as const, content: 'How warm is Lima?' }], tools: [weatherTool] }
  const counted = await client.messages.countTokens(request)
  const billed = await client.messages.create({ ...request, max_tokens: 4 })
  assert.equal(counted.input_tokens, billed.usage.input_tokens + (billed.usage.cache_read_input_tokens ?? 0))
  assert.ok(counted.input_tokens > (await client.messages.countTokens({ model: TINY_MODEL_ID, messages: request.messages })).input_tokens, 'tools and system count')

  // Claude Code's request shape: ?beta=true, fields without meaning here, and a server tool beside its own
  const res = await api.post('/v1/messages?beta=true', {
    ...request,
    max_tokens: 4,
    metadata: { user_id: 'someone' },
    thinking: { type: 'adaptive' },
    context_management: { edits: [] },
    output_config: { effort: 'high' },
    tools: [...request.tools, { type: 'web_search_20250305', name: 'web_search', max_uses: 5 }]
  })
  assert.equal(res.status, 200, JSON.stringify(res.body))
  assert.equal(res.headers.get('x-meshnode-ignored-tools'), 'web_search')

  const refusals: Array<[Record<string, unknown>, number, string, RegExp]> = [
    [{ model: 'not-a-model', max_tokens: 4, messages: hello }, 404, 'not_found_error', /not-a-model/],
    [{ model: TINY_MODEL_ID, max_tokens: 4, messages: [{ role: 'user', content: [{ type: 'container_upload', file_id: 'f' }] }] }, 400, 'invalid_request_error', /messages\.0\.content\.0: content blocks of type container_upload/],
    [{ model: TINY_MODEL_ID, messages: hello }, 400, 'invalid_request_error', /max_tokens/],
    [{ model: TINY_MODEL_ID, max_tokens: 4, messages: [] }, 400, 'invalid_request_error', /messages/],
    [{ model: TINY_MODEL_ID, max_tokens: 4, messages: hello, tool_choice: { type: 'tool' } }, 400, 'invalid_request_error', /tool_choice/],
    [{ model: TINY_MODEL_ID, max_tokens: 4, messages: [{ role: 'user', content: [{ type: 'tool_use', id: 'x', name: 'y', input: {} }] }] }, 400, 'invalid_request_error', /assistant message/]
  ]
  for (const [body, status, type, message] of refusals) {
    const refused = await api.post('/v1/messages', body)
    assert.equal(refused.status, status, JSON.stringify(refused.body))
    assert.deepEqual(Object.keys(refused.body), ['type', 'error', 'request_id'])
    assert.equal(refused.body.type, 'error')
    assert.equal(refused.body.error.type, type)
    assert.match(refused.body.error.message, message)
    // The request's id, as Anthropic's API gives it: in the body and in its request-id header
    assert.equal(refused.body.request_id, refused.headers.get('request-id'))
    assert.equal(refused.body.request_id, refused.headers.get('x-request-id'))
  }
  // Anthropic's SDK reads the type and the request id
  await assert.rejects(client.messages.create({ model: 'not-a-model', max_tokens: 4, messages: hello }),
    (err: unknown) => err instanceof Anthropic.NotFoundError && err.type === 'not_found_error' && /not-a-model/.test(err.message) && /^[0-9a-f-]{36}$/.test(err.requestID ?? ''))
  const { _request_id: requestID } = await client.messages.create({ model: TINY_MODEL_ID, max_tokens: 1, messages: hello })
  assert.match(requestID ?? '', /^[0-9a-f-]{36}$/)
})

test('errors on Anthropic\'s routes are in its vocabulary, answered or streamed: a 503 is overloaded_error', async (t) => {
  const { node, api } = await startChatNode(t, { contextSize: 32_768 }, { contextLength: 32_768 })
  const client = anthropicFor(node.url)
  // A model that fails mid-stream (pulled out from under the generation): Anthropic's error event, with the request id
  const stream = client.messages.stream({ model: TINY_MODEL_ID, max_tokens: 100_000, temperature: 0, messages: hello })
  const { response } = await stream.withResponse()
  await waitFor(() => node.engine.stats().busySlots === 1, { what: 'generation to start' })
  await node.engine.close()
  await assert.rejects(stream.finalMessage(), (err: unknown) => {
    assert.ok(err instanceof Anthropic.APIError, String(err))
    assert.equal(err.type, 'overloaded_error')
    assert.deepEqual(Object.keys(err.error as object), ['type', 'error', 'request_id'])
    assert.equal((err.error as { request_id: string }).request_id, response.headers.get('request-id'))
    return true
  })
  // A model kept from the request (every request goes to peers, and there are none): 503, overloaded_error
  assert.equal((await api.patch('/v1/app/settings', { inference_backend: 'peers' })).status, 200)
  await assert.rejects(client.messages.create({ model: TINY_MODEL_ID, max_tokens: 4, messages: hello }),
    (err: unknown) => err instanceof Anthropic.APIError && err.status === 503 && err.type === 'overloaded_error')

  // Each of our types in Anthropic's words (its SDK's ErrorType, and request_too_large of its error docs)
  const words = Object.fromEntries(['invalid_request_error', 'authentication_error', 'insufficient_credits', 'permission_error', 'not_found', 'method_not_allowed',
    'conflict', 'request_too_large', 'rate_limit_error', 'service_unavailable', 'insufficient_storage', 'internal_error']
    .map((type) => [type, anthropicError({ error: { type, message: 'm', param: null, code: null } }, 'r').error.type]))
  assert.deepEqual(words, {
    invalid_request_error: 'invalid_request_error',
    authentication_error: 'authentication_error',
    insufficient_credits: 'billing_error',
    permission_error: 'permission_error',
    not_found: 'not_found_error',
    method_not_allowed: 'invalid_request_error',
    conflict: 'conflict_error',
    request_too_large: 'request_too_large',
    rate_limit_error: 'rate_limit_error',
    service_unavailable: 'overloaded_error',
    insufficient_storage: 'api_error',
    internal_error: 'api_error'
  })
})

test('images, documents and search results are read as their text or a placeholder: a session that read a PNG goes on', async (t) => {
  const { node } = await startChatNode(t, {}, { contextLength: 4096 })
  const client = anthropicFor(node.url)
  const png: Anthropic.ImageBlockParam = { type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'iVBORw0KGgo=' } }
  const imageOmitted = '[image omitted: this model reads text only]'
  const ask = (toolResult: Anthropic.ToolResultBlockParam['content'], blocks: Anthropic.ContentBlockParam[]): Anthropic.MessageCreateParamsNonStreaming => ({
    model: TINY_MODEL_ID,
    max_tokens: 4,
    tools: [weatherTool],
    messages: [
      { role: 'user', content: 'Look at the screenshot' },
      { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_1', name: 'get_weather', input: { city: 'Paris' } }] },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: toolResult }, ...blocks, { type: 'text', text: 'What is in it?' }] }
    ]
  })
  // Claude Code's Read of a PNG answers with a text block and the image; the history then holds it in every turn
  const toolReference = { type: 'tool_reference', tool_name: 'get_weather' } as unknown as Anthropic.TextBlockParam // tool search's answer, in the beta types only
  const withMedia = ask([{ type: 'text', text: 'Read image (1 KB)' }, png, toolReference], [
    png,
    { type: 'document', title: 'spec', source: { type: 'base64', media_type: 'application/pdf', data: 'JVBERi0=' } },
    { type: 'document', source: { type: 'text', media_type: 'text/plain', data: 'Plain notes' } },
    { type: 'search_result', source: 'https://example.com', title: 'Example', content: [{ type: 'text', text: 'A result' }] }
  ])
  const answer = await client.messages.create(withMedia)
  assert.equal(answer.type, 'message')
  const streamed = await client.messages.stream(withMedia).finalMessage()
  assert.equal(streamed.type, 'message')

  // What the model reads is exactly the placeholders and texts, written as text
  const asText = ask(`Read image (1 KB)\n${imageOmitted}\n[tool: get_weather]`, [
    imageOmitted, '[document "spec" omitted: this model reads text only]', 'Plain notes', 'Search result: Example, https://example.com\nA result'
  ].map((text) => ({ type: 'text' as const, text })))
  const counted = await client.messages.countTokens(withMedia)
  assert.equal(counted.input_tokens, (await client.messages.countTokens(asText)).input_tokens)
})

test('with network access on, x-api-key is the key; a wrong one is 401 in Anthropic\'s shape', async (t) => {
  const { node, api } = await startChatNode(t, {}, { contextLength: 4096 })
  const admin = api.withHeaders({ authorization: `Bearer ${node.adminToken}` })
  const { body: key } = await admin.post('/v1/app/apikeys', { name: 'claude-code', scope: 'inference' })
  assert.equal((await admin.patch('/v1/app/settings', { allow_network_access: true })).status, 200)
  const answer = await anthropicFor(node.url, key.key).messages.create({ model: TINY_MODEL_ID, max_tokens: 4, messages: hello })
  assert.equal(answer.type, 'message')
  await assert.rejects(anthropicFor(node.url, 'sk-wrong').messages.create({ model: TINY_MODEL_ID, max_tokens: 4, messages: hello }),
    (err: unknown) => err instanceof Anthropic.AuthenticationError && (err.error as { type: string }).type === 'error')
  const missing = await api.post('/v1/messages', { model: TINY_MODEL_ID, max_tokens: 4, messages: hello })
  assert.equal(missing.status, 401)
  assert.equal(missing.body.type, 'error')
  assert.equal(missing.body.error.type, 'authentication_error')
})

test('Claude Code\'s own request, as recorded, is understood whole: its tools, system blocks and mid-conversation system role', async (t) => {
  const { api } = await startChatNode(t, { contextSize: 65_536 }, { contextLength: 65_536 })
  const recorded = JSON.parse(await readFile(join(import.meta.dirname, '..', 'fixtures', 'claude-code-2.1.332-messages.json'), 'utf8')) as { url: string, body: Record<string, unknown> }
  assert.equal(recorded.url, '/v1/messages?beta=true')
  const body = { ...recorded.body, model: TINY_MODEL_ID }
  const counted = await api.post('/v1/messages/count_tokens?beta=true', body)
  assert.equal(counted.status, 200, JSON.stringify(counted.body))
  assert.ok(counted.body.input_tokens > 10_000, String(counted.body.input_tokens))
  // Without the tools it is shorter: they are in the prompt, in the model's function-call format
  const bare = await api.post('/v1/messages/count_tokens', { ...body, tools: [] })
  assert.ok(bare.body.input_tokens < counted.body.input_tokens)
})
