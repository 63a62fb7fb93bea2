// Tools: function calling through the official openai client on the generated tiny GGUF. The tiny model's
// weights are random, so it never chooses a call by itself (`auto` answers in text); `required` and a named tool
// make it call one, and the grammar makes its arguments valid against the tool's schema whatever it would write.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import type OpenAI from 'openai'
import { collectSse, startChatNode, TINY_MODEL_ID, type ChatTestNode } from '../support/chat-node.ts'
import { CLOCK, WEATHER, assertValidArguments } from '../support/tools.ts'
import type { TestContext } from 'node:test'

const ask = [{ role: 'user' as const, content: 'What is the weather in Paris?' }]

/** The tool definitions take a few hundred tokens in the template, so the model gets a context that holds them. */
async function startToolNode (t: TestContext): Promise<ChatTestNode> {
  return await startChatNode(t, { contextSize: 4096 }, { contextLength: 4096 })
}

test('a named tool_choice calls that tool with arguments valid against its schema, streamed and not', async (t) => {
  const { openai } = await startToolNode(t)
  const request = {
    model: TINY_MODEL_ID, messages: ask, tools: [CLOCK, WEATHER], temperature: 0,
    tool_choice: { type: 'function' as const, function: { name: 'get_weather' } }
  }
  const completion = await openai.chat.completions.create(request)
  const choice = completion.choices[0]
  assert.equal(choice.finish_reason, 'tool_calls')
  assert.equal(choice.message.content, null)
  assert.equal(choice.message.tool_calls?.length, 1)
  const call = choice.message.tool_calls?.[0]
  assert.ok(call?.type === 'function')
  assert.match(call.id, /^call_/)
  assert.equal(call.function.name, 'get_weather')
  assertValidArguments(call.function.name, call.function.arguments)
  assert.ok((completion.usage?.completion_tokens ?? 0) > 0)

  // Streamed: the SDK's own stream helper reassembles the deltas into the same call.
  const stream = openai.chat.completions.stream(request)
  const deltas: OpenAI.Chat.Completions.ChatCompletionChunk[] = []
  stream.on('chunk', (chunk) => { deltas.push(chunk) })
  const final = await stream.finalChatCompletion()
  const streamedCall = final.choices[0].message.tool_calls?.[0]
  assert.ok(streamedCall?.type === 'function')
  assert.equal(final.choices[0].finish_reason, 'tool_calls')
  assert.equal(streamedCall.function.name, 'get_weather')
  assert.equal(streamedCall.function.arguments, call.function.arguments, 'greedy: the streamed arguments are the non-streamed ones')
  // OpenAI's delta shape: the first delta of the call has index, id, type and name; later ones only fragments.
  const toolDeltas = deltas.flatMap((chunk) => chunk.choices[0]?.delta.tool_calls ?? [])
  assert.ok(toolDeltas.length > 2, 'the arguments arrive in several fragments')
  assert.deepEqual(toolDeltas[0], { index: 0, id: streamedCall.id, type: 'function', function: { name: 'get_weather', arguments: '' } })
  for (const later of toolDeltas.slice(1)) {
    assert.deepEqual(Object.keys(later).sort(), ['function', 'index'])
    assert.equal(later.index, 0)
    assert.deepEqual(Object.keys(later.function ?? {}), ['arguments'])
  }

  // runTools, the SDK's agent loop, calls our function with the parsed arguments.
  let received: unknown = null
  const runner = openai.chat.completions.runTools({
    model: TINY_MODEL_ID, messages: ask, temperature: 0.8, seed: 3, stream: true,
    tool_choice: { type: 'function', function: { name: 'get_weather' } },
    tools: [{
      type: 'function',
      function: {
        name: 'get_weather', description: 'The weather', parameters: WEATHER.function.parameters ?? {}, parse: (text: string): unknown => JSON.parse(text),
        function: (args: unknown) => { received = args; return 'sunny' }
      }
    }]
  })
  await runner.done()
  assert.ok(received != null, 'the SDK ran the tool')
  assertValidArguments('get_weather', JSON.stringify(received))
})

test('required calls one of the tools; none answers in text; auto with a model that prefers text answers in text', async (t) => {
  const { openai } = await startToolNode(t)
  for (const seed of [1, 2, 3]) {
    const required: OpenAI.Chat.Completions.ChatCompletion = await openai.chat.completions.create({ model: TINY_MODEL_ID, messages: ask, tools: [WEATHER, CLOCK], tool_choice: 'required', temperature: 1, seed })
    const call = required.choices[0].message.tool_calls?.[0]
    assert.equal(required.choices[0].finish_reason, 'tool_calls')
    assert.ok(call?.type === 'function')
    assert.ok(['get_weather', 'get_time'].includes(call.function.name))
    assertValidArguments(call.function.name, call.function.arguments)
  }
  const none = await openai.chat.completions.create({ model: TINY_MODEL_ID, messages: ask, tools: [WEATHER], tool_choice: 'none', max_tokens: 8, temperature: 0 })
  assert.equal(none.choices[0].message.tool_calls, undefined)
  assert.ok((none.choices[0].message.content ?? '').length > 0)
  assert.equal(none.choices[0].finish_reason, 'length')
  const auto = await openai.chat.completions.create({ model: TINY_MODEL_ID, messages: ask, tools: [WEATHER], max_tokens: 8, temperature: 0 })
  assert.ok((auto.choices[0].message.content ?? '').length > 0)
})

test('a tool-call round trip (assistant tool_calls, then tool messages) is accepted and answered', async (t) => {
  const { openai } = await startToolNode(t)
  const first = await openai.chat.completions.create({
    model: TINY_MODEL_ID, messages: ask, tools: [WEATHER], temperature: 0, tool_choice: { type: 'function', function: { name: 'get_weather' } }
  })
  const message = first.choices[0].message
  const call = message.tool_calls?.[0]
  assert.ok(call?.type === 'function')
  const followUp = [...ask, message, { role: 'tool' as const, tool_call_id: call.id, content: JSON.stringify({ temperature: 21, sky: 'clear' }) }]
  const answer = await openai.chat.completions.create({ model: TINY_MODEL_ID, messages: followUp, tools: [WEATHER], max_tokens: 8, temperature: 0 })
  assert.equal(answer.choices[0].finish_reason, 'length')
  assert.ok((answer.choices[0].message.content ?? '').length > 0)
  // The tool's result is part of the prompt: a different result is a different prompt.
  const other = await openai.chat.completions.create({
    model: TINY_MODEL_ID, tools: [WEATHER], max_tokens: 8, temperature: 0,
    messages: [...ask, message, { role: 'tool', tool_call_id: call.id, content: 'a much longer result about rain and wind over the city' }]
  })
  assert.ok((other.usage?.prompt_tokens ?? 0) > (answer.usage?.prompt_tokens ?? 0))
  // Two calls in one assistant message, each answered, in any order
  const two = await openai.chat.completions.create({
    model: TINY_MODEL_ID, tools: [WEATHER, CLOCK], max_tokens: 4, temperature: 0,
    messages: [...ask, {
      role: 'assistant', content: null,
      tool_calls: [
        { id: 'a', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Lima","days":1,"metric":true}' } },
        { id: 'b', type: 'function', function: { name: 'get_time', arguments: '{"zone":"UTC"}' } }
      ]
    }, { role: 'tool', tool_call_id: 'b', content: '12:00' }, { role: 'tool', tool_call_id: 'a', content: 'rain' }]
  })
  assert.equal(two.usage?.completion_tokens, 4)
})

test('tool requests it cannot serve as asked are refused with 400 naming the parameter', async (t) => {
  const { api, node } = await startToolNode(t)
  const base = { model: TINY_MODEL_ID, messages: ask, tools: [WEATHER], max_tokens: 4 }
  const callMessage = { role: 'assistant', content: null, tool_calls: [{ id: 'c1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Lima"}' } }] }
  const cases: Array<[Record<string, unknown>, string]> = [
    [{ ...base, tool_choice: { type: 'function', function: { name: 'get_time' } } }, 'tool_choice'],
    [{ ...base, tool_choice: 'sometimes' }, 'tool_choice'],
    [{ ...base, tools: [WEATHER, WEATHER] }, 'tools.1.function.name'],
    [{ ...base, tools: [{ type: 'function', function: { name: 'bad name!' } }] }, 'tools.0.function.name'],
    [{ ...base, tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object', properties: { code: { type: 'string', pattern: '^([a-z]+)*$' } } } } }] }, 'tools.0.function.parameters.properties.code.pattern'],
    [{ ...base, response_format: { type: 'json_object' } }, 'response_format'],
    [{ ...base, messages: [...ask, callMessage] }, 'messages.1.tool_calls.0'],
    [{ ...base, messages: [...ask, callMessage, { role: 'user', content: 'and?' }] }, 'messages.1.tool_calls.0'],
    [{ ...base, messages: [...ask, callMessage, { role: 'tool', tool_call_id: 'c2', content: 'x' }] }, 'messages.2.tool_call_id'],
    [{ ...base, messages: [...ask, { ...callMessage, tool_calls: [{ id: 'c1', type: 'function', function: { name: 'get_weather', arguments: '{city' } }] }, { role: 'tool', tool_call_id: 'c1', content: 'x' }] }, 'messages.1.tool_calls.0.function.arguments']
  ]
  for (const [body, param] of cases) {
    const res = await api.post('/v1/chat/completions', body)
    assert.equal(res.status, 400, `${param}: ${JSON.stringify(res.body)}`)
    assert.equal(res.body.error.type, 'invalid_request_error')
    assert.equal(res.body.error.param, param, JSON.stringify(res.body))
  }
  assert.deepEqual(node.engine.stats(), { slots: 2, busySlots: 0, queued: 0 }, 'nothing took a slot')
})

/**
 * A tool's parameters as zod v4 and MCP servers write them: keywords no grammar here enforces (`propertyNames` from
 * `z.record`, `uniqueItems`, `multipleOf`, `not`, `allOf`, `contains`, `dependentRequired`, `format: "regex"`). Every
 * string and list is bounded, so the random model's call ends.
 */
const CONFIGURE = {
  type: 'object',
  properties: {
    env: { type: 'object', propertyNames: { type: 'string', pattern: '^[A-Z_]+$' }, additionalProperties: { type: 'string', maxLength: 4 }, maxProperties: 2 },
    tags: { type: 'array', items: { type: 'string', maxLength: 4 }, maxItems: 3, uniqueItems: true, contains: { const: 'x' } },
    step: { type: 'integer', minimum: 0, maximum: 20, multipleOf: 5 },
    mode: { type: 'string', maxLength: 4, not: { const: '' } },
    id: { allOf: [{ $ref: '#/$defs/id' }], description: 'pydantic gives a $ref a description this way' },
    expression: { type: 'string', format: 'regex', maxLength: 4 }
  },
  required: ['tags', 'step'],
  allOf: [{ required: ['mode'] }],
  dependentRequired: { env: ['mode'] },
  $defs: { id: { type: 'integer', minimum: 1, maximum: 9 } }
}

test('a tool\'s parameters with keywords the grammar cannot enforce are taken, those left out; response_format still refuses them', async (t) => {
  const { api } = await startToolNode(t)
  const tools = [{ type: 'function', function: { name: 'configure', parameters: CONFIGURE } }]
  const called = await api.post('/v1/chat/completions', { model: TINY_MODEL_ID, messages: ask, tools, tool_choice: 'required', temperature: 0 })
  assert.equal(called.status, 200, JSON.stringify(called.body))
  assert.equal(called.body.choices[0].finish_reason, 'tool_calls')
  const call = called.body.choices[0].message.tool_calls[0]
  assert.equal(call.function.name, 'configure')
  // Held to what the grammar enforces: the named properties, of their types and bounds
  const args = JSON.parse(call.function.arguments) as Record<string, unknown>
  assert.deepEqual(Object.keys(args).filter((key) => !Object.hasOwn(CONFIGURE.properties, key)), [], call.function.arguments)
  assert.ok(Array.isArray(args.tags) && args.tags.length <= 3, call.function.arguments)
  assert.ok(Number.isInteger(args.step) && (args.step as number) >= 0 && (args.step as number) <= 20, call.function.arguments)
  // Anthropic's Messages API takes the same schema as a tool's input_schema
  const messages = await api.post('/v1/messages', {
    model: TINY_MODEL_ID, max_tokens: 200, messages: ask, temperature: 0,
    tools: [{ name: 'configure', input_schema: CONFIGURE }], tool_choice: { type: 'any' }
  })
  assert.equal(messages.status, 200, JSON.stringify(messages.body))
  assert.equal(messages.body.stop_reason, 'tool_use')

  // As response_format's schema, output must hold to all of it: refused, naming the first keyword it cannot
  const format = await api.post('/v1/chat/completions', {
    model: TINY_MODEL_ID, messages: ask, max_tokens: 4, response_format: { type: 'json_schema', json_schema: { name: 'configure', schema: CONFIGURE } }
  })
  assert.equal(format.status, 400, JSON.stringify(format.body))
  assert.equal(format.body.error.type, 'invalid_request_error')
  assert.equal(format.body.error.param, 'response_format.json_schema.schema.allOf')
  assert.match(format.body.error.message, /is not supported for constrained output/)
  // The limits against hostile schemas hold for tools too
  const hostile = await api.post('/v1/chat/completions', {
    model: TINY_MODEL_ID, messages: ask, max_tokens: 4,
    tools: [{ type: 'function', function: { name: 'configure', parameters: { ...CONFIGURE, properties: Object.fromEntries(Array.from({ length: 128 }, (_, i) => [`p${i}`, { not: {} }])) } } }]
  })
  assert.equal(hostile.status, 400, JSON.stringify(hostile.body))
  assert.match(hostile.body.error.message, /more than 4096 subschemas \(a value of any JSON counts 32\)/)
})

test('a tool call that breaks what its grammar could not enforce fails as an answer breaking response_format\'s schema does', async (t) => {
  const { api } = await startToolNode(t)
  // A pattern the grammar does not write: at temperature 0 the random model's string does not match it
  const schema = { type: 'object', properties: { code: { type: 'string', maxLength: 3, pattern: '^zq[0-9]$' } }, required: ['code'], additionalProperties: false }
  const byTool = { model: TINY_MODEL_ID, messages: ask, max_tokens: 60, temperature: 0, tools: [{ type: 'function', function: { name: 'lookup', parameters: schema } }], tool_choice: 'required' }
  const byFormat = { model: TINY_MODEL_ID, messages: ask, max_tokens: 60, temperature: 0, response_format: { type: 'json_schema', json_schema: { name: 'lookup', schema } } }
  const answer = await api.post('/v1/chat/completions', byFormat)
  const call = await api.post('/v1/chat/completions', byTool)
  assert.equal(answer.status, 503, JSON.stringify(answer.body))
  assert.equal(call.status, 503, JSON.stringify(call.body))
  assert.deepEqual(Object.keys(call.body.error).sort(), Object.keys(answer.body.error).sort())
  assert.equal(call.body.error.type, answer.body.error.type)
  assert.match(call.body.error.message, /^The model's call of lookup breaks its schema: arguments\.code does not match the pattern \^zq\[0-9\]\$\. Ask again\.$/)
  assert.match(answer.body.error.message, /^The model's answer breaks its schema: answer\.code does not match the pattern/)

  // Streamed, the call's deltas had gone out; the stream ends with the error event response_format's break ends with
  const streamed = async (body: object): Promise<string[]> => {
    const res = await fetch(`${api.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ ...body, stream: true }) })
    assert.equal(res.status, 200)
    return (await collectSse(res)).data
  }
  const answerEvents = await streamed(byFormat)
  const callEvents = await streamed(byTool)
  for (const events of [answerEvents, callEvents]) assert.equal(events.at(-1), '[DONE]')
  const answerError = JSON.parse(answerEvents.at(-2) as string)
  const callError = JSON.parse(callEvents.at(-2) as string)
  assert.deepEqual(Object.keys(callError).sort(), Object.keys(answerError).sort())
  assert.equal(callError.error.type, answerError.error.type)
  assert.equal(callError.error.message, call.body.error.message)
  assert.ok(callEvents.some((data) => data !== '[DONE]' && JSON.parse(data).choices?.[0]?.delta?.tool_calls != null), 'the call had begun')
  assert.ok(!callEvents.some((data) => data !== '[DONE]' && JSON.parse(data).choices?.[0]?.finish_reason === 'tool_calls'), 'not given as a finished call')
})
