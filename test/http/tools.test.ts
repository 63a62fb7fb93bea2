// Tools: function calling through the official openai client on the generated tiny GGUF. The tiny model's
// weights are random, so it never chooses a call by itself (`auto` answers in text); `required` and a named tool
// make it call one, and the grammar makes its arguments valid against the tool's schema whatever it would write.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import type OpenAI from 'openai'
import { startChatNode, TINY_MODEL_ID, type ChatTestNode } from '../support/chat-node.ts'
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
