// OpenAI's Responses API, through the official openai client against a real node with the tiny GGUF: the response
// object, the stream's events in OpenAI's order (assembled by the SDK's own stream helper), function calls and their
// outputs, tools of other kinds left out by name, kept responses continued, read and deleted, and refusals.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import type OpenAI from 'openai'
import type { FunctionTool, ResponseStreamEvent } from 'openai/resources/responses/responses'
import { startChatNode, TINY_MODEL_ID } from '../support/chat-node.ts'
import { assertValidArguments, WEATHER } from '../support/tools.ts'

const weatherTool: FunctionTool = {
  type: 'function',
  name: WEATHER.function.name,
  description: WEATHER.function.description ?? null,
  parameters: WEATHER.function.parameters ?? null,
  strict: true
}

/** `store` is in the response object (OpenAI's API answers it) but not in the SDK's type. */
function storeOf (response: OpenAI.Responses.Response): unknown {
  return (response as unknown as { store?: unknown }).store
}

function storedCount (db: { prepare: (sql: string) => { get: () => unknown } }): number {
  return (db.prepare('SELECT COUNT(*) AS n FROM stored_responses').get() as { n: number }).n
}

test('create: a string input and input items; the response object, its usage, and the max_output_tokens cut', async (t) => {
  const { openai } = await startChatNode(t)
  const { data: response, response: raw } = await openai.responses.create({ model: TINY_MODEL_ID, input: 'Hello there', max_output_tokens: 8, temperature: 0 }).withResponse()
  assert.equal(raw.headers.get('x-served-by'), 'local')
  assert.match(response.id, /^resp_/)
  assert.equal(response.object, 'response')
  assert.equal(response.model, TINY_MODEL_ID)
  assert.equal(response.error, null)
  // The tiny model never stops by itself within 8 tokens: the cut is told as OpenAI tells it
  assert.equal(response.status, 'incomplete')
  assert.deepEqual(response.incomplete_details, { reason: 'max_output_tokens' })
  assert.equal(response.output.length, 1)
  const message = response.output[0]
  assert.ok(message.type === 'message', JSON.stringify(response.output))
  assert.match(message.id, /^msg_/)
  assert.equal(message.role, 'assistant')
  assert.equal(message.status, 'incomplete')
  assert.equal(message.content.length, 1)
  assert.ok(message.content[0].type === 'output_text')
  assert.deepEqual(message.content[0].annotations, [])
  assert.equal(response.output_text, message.content[0].text)
  assert.equal(response.usage?.output_tokens, 8)
  assert.ok((response.usage?.input_tokens ?? 0) > 0)
  assert.equal(response.usage?.total_tokens, (response.usage?.input_tokens ?? 0) + 8)
  assert.deepEqual(response.usage?.output_tokens_details, { reasoning_tokens: 0 })
  assert.deepEqual(response.usage?.input_tokens_details, { cached_tokens: 0 })
  assert.equal(storeOf(response), true)
  assert.equal(response.max_output_tokens, 8)
  assert.equal(response.temperature, 0)
  assert.equal(response.previous_response_id, null)
  assert.deepEqual(response.text, { format: { type: 'text' } })

  // The same user message as an item (with the `type`-less shape the SDKs send, and input_text parts) is the same
  // prompt; instructions, a developer message and a reasoning item sent back are read as the docs say
  const asItems = await openai.responses.create({
    model: TINY_MODEL_ID, max_output_tokens: 8, temperature: 0, input: [{ role: 'user', content: [{ type: 'input_text', text: 'Hello there' }] }]
  })
  assert.equal(asItems.output_text, response.output_text)
  assert.equal(asItems.usage?.input_tokens, response.usage?.input_tokens)
  const briefed = await openai.responses.create({
    model: TINY_MODEL_ID, max_output_tokens: 2, instructions: 'Be brief.', reasoning: { effort: 'high', summary: 'auto' },
    input: [
      { type: 'reasoning', id: 'rs_1', summary: [] },
      { type: 'message', role: 'developer', content: 'Answer in French.' },
      { role: 'user', content: 'Hello there' }
    ]
  })
  assert.equal(briefed.instructions, 'Be brief.')
  assert.deepEqual(briefed.reasoning, { effort: 'high', summary: 'auto' })
  assert.ok((briefed.usage?.input_tokens ?? 0) > (response.usage?.input_tokens ?? 0), 'instructions and the developer message are read')
})

test('stream: the events in OpenAI\'s order, numbered; the SDK\'s stream helper assembles the same response', async (t) => {
  const { openai } = await startChatNode(t)
  const stream = openai.responses.stream({ model: TINY_MODEL_ID, input: 'Tell me more', max_output_tokens: 10, temperature: 0 })
  const events: ResponseStreamEvent[] = []
  for await (const event of stream) events.push(event)
  const final = await stream.finalResponse()

  assert.deepEqual(events.map((e) => e.sequence_number), events.map((_, i) => i))
  const types = events.map((e) => e.type)
  assert.deepEqual(types.slice(0, 4), ['response.created', 'response.in_progress', 'response.output_item.added', 'response.content_part.added'])
  assert.deepEqual(types.slice(-4), ['response.output_text.done', 'response.content_part.done', 'response.output_item.done', 'response.incomplete'])
  assert.ok(types.slice(4, -4).length > 0 && types.slice(4, -4).every((type) => type === 'response.output_text.delta'), types.join(','))
  const created = events[0]
  assert.ok(created.type === 'response.created')
  assert.equal(created.response.status, 'in_progress')
  assert.deepEqual(created.response.output, [])

  const streamed = events.flatMap((e) => e.type === 'response.output_text.delta' ? [e.delta] : []).join('')
  assert.equal(final.output_text, streamed)
  assert.equal(final.status, 'incomplete')
  assert.equal(final.usage?.output_tokens, 10)
  const last = events.at(-1)
  assert.ok(last?.type === 'response.incomplete')
  assert.equal(final.id, last.response.id)
  // The same request not streamed answers the same text (temperature 0)
  const whole = await openai.responses.create({ model: TINY_MODEL_ID, input: 'Tell me more', max_output_tokens: 10, temperature: 0 })
  assert.equal(whole.output_text, streamed)
})

test('a failure after the stream opened is a response.failed event with the error; the response is not kept', async (t) => {
  const { node, api, openai } = await startChatNode(t)
  // A pattern the grammar cannot enforce is checked on the finished answer; at temperature 0 the tiny model breaks it
  const format = { type: 'json_schema' as const, name: 'code', schema: { type: 'object', properties: { code: { type: 'string', maxLength: 3, pattern: '^x{3}$' } }, required: ['code'], additionalProperties: false } }
  const request = { model: TINY_MODEL_ID, input: 'hi', max_output_tokens: 60, temperature: 0, text: { format } }
  const stream = openai.responses.stream(request)
  const events: ResponseStreamEvent[] = []
  for await (const event of stream) events.push(event)
  const final = await stream.finalResponse()
  assert.equal(events[0]?.type, 'response.created')
  assert.ok(events.some((e) => e.type === 'response.output_text.delta'), 'the answer had started')
  const failed = events.at(-1)
  assert.ok(failed?.type === 'response.failed', events.map((e) => e.type).join(','))
  assert.equal(failed.sequence_number, events.length - 1)
  assert.equal(final.status, 'failed')
  assert.equal(final.error?.code, 'server_error')
  assert.match(final.error?.message ?? '', /breaks its schema/)
  assert.equal((await api.get(`/v1/responses/${final.id}`)).status, 404)
  // Not streamed, the same failure is the envelope with its status
  const whole = await api.post('/v1/responses', request)
  assert.equal(whole.status, 503)
  assert.equal(whole.body.error.type, 'service_unavailable')
  assert.equal(storedCount(node.db), 0)
})

test('a named function tool_choice answers a function_call valid against its schema, streamed and not; its output goes back', async (t) => {
  const { openai } = await startChatNode(t, {}, { contextLength: 4096 })
  const forced = { model: TINY_MODEL_ID, max_output_tokens: 200, input: 'Weather in Paris?', tools: [weatherTool], tool_choice: { type: 'function' as const, name: 'get_weather' } }
  const answer = await openai.responses.create(forced)
  assert.equal(answer.status, 'completed')
  const calls = answer.output.filter((item) => item.type === 'function_call')
  assert.equal(calls.length, 1, JSON.stringify(answer.output))
  const call = calls[0]
  assert.ok(call.type === 'function_call')
  assert.match(call.id ?? '', /^fc_/)
  assert.ok(call.call_id.length > 0)
  assert.equal(call.name, 'get_weather')
  assert.equal(call.status, 'completed')
  assertValidArguments('get_weather', call.arguments)

  const stream = openai.responses.stream(forced)
  const events: ResponseStreamEvent[] = []
  for await (const event of stream) events.push(event)
  const final = await stream.finalResponse()
  const callEvents = events.map((e) => e.type).filter((type) => type.startsWith('response.output_item') || type.startsWith('response.function_call'))
  assert.equal(callEvents[0], 'response.output_item.added')
  assert.deepEqual(callEvents.slice(-2), ['response.function_call_arguments.done', 'response.output_item.done'])
  assert.ok(callEvents.slice(1, -2).every((type) => type === 'response.function_call_arguments.delta'), callEvents.join(','))
  assert.equal(events.at(-1)?.type, 'response.completed')
  const streamedCall = final.output.find((item) => item.type === 'function_call')
  assert.ok(streamedCall?.type === 'function_call')
  const deltas = events.flatMap((e) => e.type === 'response.function_call_arguments.delta' ? [e.delta] : []).join('')
  assert.equal(streamedCall.arguments, deltas)
  assertValidArguments('get_weather', streamedCall.arguments)

  // The call and its output sent back as items (as the Agents SDK does, the output items as they came): a text answer
  const followUp = await openai.responses.create({
    model: TINY_MODEL_ID, max_output_tokens: 6, tools: [weatherTool], tool_choice: 'none', store: false,
    input: [{ role: 'user', content: 'Weather in Paris?' }, ...(answer.output as OpenAI.Responses.ResponseInputItem[]), { type: 'function_call_output', call_id: call.call_id, output: 'Sunny, 21 degrees' }]
  })
  assert.equal(followUp.output[0]?.type, 'message')
  const shorter = await openai.responses.create({
    model: TINY_MODEL_ID, max_output_tokens: 1, tools: [weatherTool], tool_choice: 'none', store: false,
    input: [{ role: 'user', content: 'Weather in Paris?' }, call, { type: 'function_call_output', call_id: call.call_id, output: [{ type: 'input_text', text: 'ok' }] }]
  })
  assert.ok((followUp.usage?.input_tokens ?? 0) > (shorter.usage?.input_tokens ?? 0), 'the call\'s output was read')
  // Or continued from the kept response, sending only the output
  const continued = await openai.responses.create({
    model: TINY_MODEL_ID, max_output_tokens: 6, tools: [weatherTool], tool_choice: 'none', store: false, previous_response_id: answer.id,
    input: [{ type: 'function_call_output', call_id: call.call_id, output: 'Sunny, 21 degrees' }]
  })
  assert.equal(continued.output[0]?.type, 'message')
  assert.equal(continued.usage?.input_tokens, followUp.usage?.input_tokens, 'the kept conversation is the one sent in full')
})

test('tools of other kinds are left out of the prompt and named in a header; a request of only those still answers', async (t) => {
  const { openai } = await startChatNode(t, {}, { contextLength: 4096 })
  const others = [
    { type: 'web_search' },
    { type: 'namespace', name: 'crm', description: 'Customer records', tools: [{ type: 'function', name: 'lookup', parameters: { type: 'object', properties: {} } }] },
    { type: 'custom', name: 'apply_patch', description: 'Edit files', format: { type: 'grammar', syntax: 'lark', definition: 'start: "x"' } },
    { type: 'local_shell' }
  ]
  const base = { model: TINY_MODEL_ID, input: 'How warm is Lima?', max_output_tokens: 2, tool_choice: 'auto' as const }
  const { data: mixed, response } = await openai.responses.create({ ...base, tools: [...others, weatherTool] as OpenAI.Responses.Tool[] }).withResponse()
  assert.equal(response.headers.get('x-meshnode-ignored-tools'), 'web_search, namespace:crm, custom:apply_patch, local_shell')
  const functionOnly = await openai.responses.create({ ...base, tools: [weatherTool] })
  assert.equal(mixed.usage?.input_tokens, functionOnly.usage?.input_tokens, 'only the function tool is in the prompt')
  assert.equal(mixed.tools.length, 5, 'the response repeats the tools as given')

  // Codex sends tool_choice auto with its tools; when none of them can run here it is a plain answer
  const { data: plain, response: plainResponse } = await openai.responses.create({ ...base, tools: others as OpenAI.Responses.Tool[] }).withResponse()
  assert.equal(plainResponse.headers.get('x-meshnode-ignored-tools'), 'web_search, namespace:crm, custom:apply_patch, local_shell')
  const noTools = await openai.responses.create(base)
  assert.equal(plain.usage?.input_tokens, noTools.usage?.input_tokens)
  assert.equal(noTools.output[0]?.type, 'message')
})

test('previous_response_id continues a kept response; GET and DELETE; store:false keeps nothing; another key sees nothing', async (t) => {
  const { node, api, openai } = await startChatNode(t)
  const first = await openai.responses.create({ model: TINY_MODEL_ID, instructions: 'Be brief.', input: 'Hello there', max_output_tokens: 4, temperature: 0 })
  const second = await openai.responses.create({ model: TINY_MODEL_ID, previous_response_id: first.id, input: 'And then?', max_output_tokens: 4, temperature: 0 })
  assert.equal(second.previous_response_id, first.id)
  // The first's conversation (its input and answer, not its instructions) comes before this input
  const explicit = await openai.responses.create({
    model: TINY_MODEL_ID, max_output_tokens: 4, temperature: 0, store: false,
    input: [{ role: 'user', content: 'Hello there' }, { role: 'assistant', content: first.output_text }, { role: 'user', content: 'And then?' }]
  })
  assert.ok((second.usage?.input_tokens ?? 0) > (first.usage?.input_tokens ?? 0))
  assert.equal(second.usage?.input_tokens, explicit.usage?.input_tokens)
  assert.equal(second.output_text, explicit.output_text)

  assert.deepEqual(await openai.responses.retrieve(first.id), first)
  const deleted = await api.send('DELETE', `/v1/responses/${first.id}`, undefined)
  assert.equal(deleted.status, 200)
  assert.deepEqual(deleted.body, { id: first.id, object: 'response', deleted: true })
  const gone = await api.get(`/v1/responses/${first.id}`)
  assert.equal(gone.status, 404)
  assert.equal(gone.body.error.type, 'not_found')
  assert.equal((await api.send('DELETE', `/v1/responses/${first.id}`, undefined)).status, 404)
  const orphan = await api.post('/v1/responses', { model: TINY_MODEL_ID, previous_response_id: first.id, input: 'Again?', max_output_tokens: 2 })
  assert.equal(orphan.status, 404)
  assert.match(orphan.body.error.message, new RegExp(first.id))
  // The second kept its own copy of the conversation: deleting the first does not break it
  assert.equal((await api.post('/v1/responses', { model: TINY_MODEL_ID, previous_response_id: second.id, input: 'Again?', max_output_tokens: 2 })).status, 200)

  const before = storedCount(node.db)
  const unkept = await openai.responses.create({ model: TINY_MODEL_ID, input: 'Hello there', max_output_tokens: 2, store: false })
  assert.equal(storeOf(unkept), false)
  assert.equal((await api.get(`/v1/responses/${unkept.id}`)).status, 404)
  assert.equal(storedCount(node.db), before)

  // A response is its API key's: another key can neither read, continue nor delete it. Bob's key has the inference
  // scope, which covers the Responses API, reading and deleting his own included.
  const keys: string[] = []
  for (const [name, scope] of [['alice', 'admin'], ['bob', 'inference']]) keys.push((await api.post('/v1/app/apikeys', { name, scope })).body.key as string)
  assert.equal((await api.patch('/v1/app/settings', { allow_network_access: true })).status, 200)
  const [alice, bob] = keys.map((key) => api.withHeaders({ authorization: `Bearer ${key}` }))
  const hers = await alice.post('/v1/responses', { model: TINY_MODEL_ID, input: 'Hello there', max_output_tokens: 2 })
  assert.equal(hers.status, 200)
  assert.equal((await alice.get(`/v1/responses/${hers.body.id}`)).status, 200)
  assert.equal((await bob.get(`/v1/responses/${hers.body.id}`)).status, 404)
  assert.equal((await bob.post('/v1/responses', { model: TINY_MODEL_ID, previous_response_id: hers.body.id, input: 'More', max_output_tokens: 2 })).status, 404)
  assert.equal((await bob.send('DELETE', `/v1/responses/${hers.body.id}`, undefined)).status, 404)
  assert.equal((await alice.get(`/v1/responses/${hers.body.id}`)).status, 200)
  const his = await bob.post('/v1/responses', { model: TINY_MODEL_ID, input: 'Hello there', max_output_tokens: 2 })
  assert.equal(his.status, 200)
  assert.equal((await bob.get(`/v1/responses/${his.body.id}`)).status, 200)
  assert.equal((await alice.get(`/v1/responses/${his.body.id}`)).status, 404)
  assert.equal((await bob.send('DELETE', `/v1/responses/${his.body.id}`, undefined)).status, 200)
})

test('text.format json_schema answers JSON that fits the schema', async (t) => {
  const { openai } = await startChatNode(t)
  const schema = { type: 'object', properties: { city: { type: 'string', enum: ['Paris', 'Lima'] }, days: { type: 'integer' } }, required: ['city', 'days'], additionalProperties: false }
  const response = await openai.responses.create({
    model: TINY_MODEL_ID, input: 'Where and how long?', max_output_tokens: 60, temperature: 0,
    text: { format: { type: 'json_schema', name: 'trip', schema, strict: true } }
  })
  assert.equal(response.status, 'completed')
  const parsed = JSON.parse(response.output_text) as Record<string, unknown>
  assert.deepEqual(Object.keys(parsed).sort(), ['city', 'days'])
  assert.ok(['Paris', 'Lima'].includes(parsed.city as string))
  assert.ok(Number.isInteger(parsed.days))
  assert.deepEqual(response.text?.format, { type: 'json_schema', name: 'trip', schema, strict: true })
  const object = await openai.responses.create({ model: TINY_MODEL_ID, input: 'Hello', max_output_tokens: 8, temperature: 0, text: { format: { type: 'json_object' } } })
  assert.match(object.output_text, /^\s*\{/)
})

test('input_image and input_file parts are read as a placeholder: a session that read an image goes on', async (t) => {
  const { openai } = await startChatNode(t, {}, { contextLength: 4096 })
  const ask = (question: OpenAI.Responses.ResponseInputMessageContentList, output: OpenAI.Responses.ResponseFunctionCallOutputItemList): OpenAI.Responses.ResponseCreateParamsNonStreaming => ({
    model: TINY_MODEL_ID,
    max_output_tokens: 2,
    temperature: 0,
    store: false,
    tools: [weatherTool],
    input: [
      { role: 'user', content: question },
      { type: 'function_call', call_id: 'c1', name: 'get_weather', arguments: '{"city":"Paris"}' },
      { type: 'function_call_output', call_id: 'c1', output }
    ]
  })
  const withMedia = await openai.responses.create(ask(
    [{ type: 'input_text', text: 'What is this?' }, { type: 'input_image', image_url: 'data:image/png;base64,iVBORw0KGgo=', detail: 'auto' }],
    [{ type: 'input_file', filename: 'report.pdf', file_data: 'data:application/pdf;base64,JVBERi0=' }]
  ))
  assert.equal(withMedia.error, null)
  // What the model reads is exactly the placeholders, written as text
  const asText = await openai.responses.create(ask(
    [{ type: 'input_text', text: 'What is this?' }, { type: 'input_text', text: '[image omitted: this model reads text only]' }],
    [{ type: 'input_text', text: '[file report.pdf omitted: this model reads text only]' }]
  ))
  assert.equal(withMedia.usage?.input_tokens, asText.usage?.input_tokens)
})

test('refusals are 400 or 404 in the envelope, naming the field as sent; nothing is kept', async (t) => {
  const { node, api } = await startChatNode(t)
  const base = { model: TINY_MODEL_ID, input: 'Hello', max_output_tokens: 2 }
  const cases: Array<[Record<string, unknown>, number, string, string | null]> = [
    [{ input: 'Hello' }, 400, 'invalid_request_error', 'model'],
    [{ ...base, input: 5 }, 400, 'invalid_request_error', 'input'],
    [{ ...base, temperature: 'hot' }, 400, 'invalid_request_error', 'temperature'],
    [{ ...base, max_output_tokens: 0 }, 400, 'invalid_request_error', 'max_output_tokens'],
    [{ ...base, input: [{ role: 'user', content: [{ type: 'input_video', url: 'v' }] }] }, 400, 'invalid_request_error', 'input.0.content.0.type'],
    [{ ...base, input: [{ role: 'user', content: 'Hi' }, { type: 'function_call_output', call_id: 'c1', output: [{ type: 'input_video', url: 'v' }] }] }, 400, 'invalid_request_error', 'input.1.output.0.type'],
    [{ ...base, input: [{ type: 'item_reference', id: 'msg_1' }] }, 400, 'invalid_request_error', 'input.0.type'],
    [{ ...base, input: [{ type: 'function_call', name: 'get_weather', arguments: '{}' }] }, 400, 'invalid_request_error', 'input.0.call_id'],
    [{ ...base, input: [] }, 400, 'invalid_request_error', 'input'],
    [{ ...base, tools: [{ type: 'function', parameters: {} }] }, 400, 'invalid_request_error', 'tools.0.name'],
    // The engine's refusal of a tool, named at the tool's place in the request (after a tool left out)
    [{ ...base, tools: [{ type: 'web_search' }, { type: 'function', name: 'bad name' }] }, 400, 'invalid_request_error', 'tools.1.name'],
    [{ ...base, tool_choice: { type: 'web_search_preview' }, tools: [{ type: 'web_search_preview' }] }, 400, 'invalid_request_error', 'tool_choice.type'],
    [{ ...base, tool_choice: { type: 'function', name: 'nowhere' }, tools: [weatherTool] }, 400, 'invalid_request_error', 'tool_choice'],
    [{ ...base, text: { format: { type: 'json_schema', name: 'n', schema: { type: 'array', items: { type: 'integer' }, minItems: 5000 } } } }, 400, 'invalid_request_error', 'text.format.schema.minItems'],
    [{ ...base, text: { format: { type: 'json_object' } }, tools: [weatherTool] }, 400, 'invalid_request_error', 'text.format'],
    [{ ...base, background: true }, 400, 'invalid_request_error', 'background'],
    [{ ...base, previous_response_id: 'resp_unknown' }, 404, 'not_found', null],
    [{ ...base, model: 'not-a-model' }, 404, 'not_found', null]
  ]
  for (const [body, status, type, param] of cases) {
    const refused = await api.post('/v1/responses', body)
    assert.equal(refused.status, status, `${JSON.stringify(body)} → ${JSON.stringify(refused.body)}`)
    assert.deepEqual(Object.keys(refused.body), ['error'])
    assert.equal(refused.body.error.type, type)
    if (param != null) assert.equal(refused.body.error.param, param, JSON.stringify(refused.body))
  }
  const unknown = await api.post('/v1/responses', { ...base, previous_response_id: 'resp_unknown' })
  assert.match(unknown.body.error.message, /resp_unknown/)
  assert.equal(storedCount(node.db), 0)
  const missing = await api.get('/v1/responses/resp_nothing')
  assert.equal(missing.status, 404)
  assert.match(missing.body.error.message, /resp_nothing/)

  // The routes are in the OpenAPI document with their schemas
  const { paths } = (await api.get('/openapi.json')).body
  assert.ok(paths['/v1/responses'].post.requestBody.content['application/json'].schema.properties.input)
  assert.ok(paths['/v1/responses'].post.responses['200'].content['application/json'].schema.properties.output)
  assert.ok(paths['/v1/responses'].post.responses['400'])
  assert.ok(paths['/v1/responses/{id}'].get.responses['200'])
  assert.ok(paths['/v1/responses/{id}'].delete.responses['200'])
})
