// What a client could send to break the node instead of getting an answer, against a real node with the tiny GGUF:
// tool names that cannot go in a response header, JSON nested deep enough to overflow the stack of whatever walks
// it next, and JSON Schemas whose grammar or output check would run without end on the event loop. Each is a 400 naming the field, streamed or not, before any generation starts, and the node keeps serving.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import type { ChatEvent, ChatRouter, RoutedGeneration } from '../../src/inference/index.ts'
import { MAX_JSON_DEPTH } from '../../src/wire/index.ts'
import { bareHttpApp } from '../support/bare-app.ts'
import { collectSse, startChatNode, TINY_MODEL_ID } from '../support/chat-node.ts'
import { waitFor, type Api, type ApiResponse } from '../support/node.ts'

const DEEP = 10_000
/** A tool's result nested deeper than JSON.stringify can write (about 4,000 levels here), within a 16k context. */
const TOOL_RESULT_DEPTH = 6_000
/** JSON text of arrays nested `depth` levels, holding one number. */
function nested (depth: number): string {
  return '['.repeat(depth) + '1' + ']'.repeat(depth)
}
const PLACEHOLDER = '"__nested__"'

/** Posts `body` with the placeholder string replaced by `json` (which JSON.stringify could not write itself). */
async function postWith (api: Api, path: string, body: object, json = nested(DEEP)): Promise<ApiResponse> {
  const text = JSON.stringify(body)
  assert.ok(text.includes(PLACEHOLDER), 'the body holds the placeholder')
  return await api.send('POST', path, text.replace(PLACEHOLDER, json), { 'content-type': 'application/json' })
}

function assertRefused (res: ApiResponse, param: string, dialect: 'openai' | 'anthropic', what: string): void {
  assert.equal(res.status, 400, `${what}: ${JSON.stringify(res.body)}`)
  assert.match(res.headers.get('content-type') ?? '', /application\/json/, what)
  if (dialect === 'anthropic') {
    assert.equal(res.body.type, 'error', what)
    assert.equal(res.body.error.type, 'invalid_request_error', what)
    assert.ok(res.body.error.message.includes(param), `${what}: ${res.body.error.message} names ${param}`)
  } else {
    assert.deepEqual(Object.keys(res.body), ['error'], what)
    assert.equal(res.body.error.type, 'invalid_request_error', what)
    assert.equal(res.body.error.param, param, `${what}: ${JSON.stringify(res.body)}`)
  }
}

const deep = JSON.parse(PLACEHOLDER) as string
const anthropic = { model: TINY_MODEL_ID, max_tokens: 4 }
const toolTurn = [
  { role: 'user', content: 'Weather in Paris?' },
  { role: 'assistant', content: [{ type: 'tool_use', id: 'call_1', name: 'get_weather', input: { city: 'Paris' } }] },
  { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'call_1', content: '{"sunny":true}' }] }
]
const weather = { name: 'get_weather', description: 'The weather', input_schema: { type: 'object', properties: { city: { type: 'string' } } } }
const chat = { model: TINY_MODEL_ID, max_tokens: 4 }
const chatTurn = [
  { role: 'user', content: 'Weather in Paris?' },
  { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }] },
  { role: 'tool', tool_call_id: 'call_1', content: '{"sunny":true}' }
]
const responses = { model: TINY_MODEL_ID, max_output_tokens: 4 }
const responsesTurn = [
  { role: 'user', content: 'Weather in Paris?' },
  { type: 'function_call', call_id: 'call_1', name: 'get_weather', arguments: '{"city":"Paris"}' },
  { type: 'function_call_output', call_id: 'call_1', output: '{"sunny":true}' }
]

test('tool names that cannot be a header value: 400 naming the tool, streamed or not, on Messages and Responses; the node keeps serving', async (t) => {
  const { api } = await startChatNode(t, {}, { contextLength: 4096 })
  for (const name of ['a\nb', 'é…', 'web search', 'x'.repeat(65)]) {
    for (const stream of [false, true]) {
      const what = `${JSON.stringify(name)}, stream ${String(stream)}`
      assertRefused(await api.post('/v1/messages', { ...anthropic, stream, messages: [{ role: 'user', content: 'Hi' }], tools: [{ type: 'web_search_20250305', name }] }), 'tools.0.name', 'anthropic', `messages ${what}`)
      assertRefused(await api.post('/v1/messages', { ...anthropic, stream, messages: [{ role: 'user', content: 'Hi' }], tools: [weather, { name }] }), 'tools.1.name', 'anthropic', `messages client tool ${what}`)
      assertRefused(await api.post('/v1/responses', { ...responses, stream, input: 'Hi', tools: [{ type: 'custom', name }] }), 'tools.0.name', 'openai', `responses ${what}`)
      assertRefused(await api.post('/v1/responses', { ...responses, stream, input: 'Hi', tools: [{ type: name }] }), 'tools.0.type', 'openai', `responses type ${what}`)
    }
  }
  assertRefused(await api.post('/v1/messages/count_tokens', { model: TINY_MODEL_ID, messages: [{ role: 'user', content: 'Hi' }], tools: [{ type: 'bash_20250124', name: 'a\nb' }] }), 'tools.0.name', 'anthropic', 'count_tokens')

  // Tools of kinds that cannot run here, with valid names, are still named in the header, streamed and not
  const served = await api.post('/v1/messages', { ...anthropic, messages: [{ role: 'user', content: 'Hi' }], tools: [{ type: 'web_search_20250305', name: 'web_search' }] })
  assert.equal(served.status, 200, JSON.stringify(served.body))
  assert.equal(served.headers.get('x-meshnode-ignored-tools'), 'web_search')
  const streamed = await fetch(`${api.url}/v1/responses`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ ...responses, stream: true, input: 'Hi', tools: [{ type: 'web_search' }, { type: 'custom', name: 'apply_patch' }] })
  })
  assert.equal(streamed.status, 200)
  assert.equal(streamed.headers.get('x-meshnode-ignored-tools'), 'web_search, custom:apply_patch')
  const { data } = await collectSse(streamed)
  assert.match(JSON.parse(data.at(-1) as string).type, /^response\.(completed|incomplete)$/)
})

test(`JSON nested ${DEEP} levels in any field that takes JSON: 400 naming the field, streamed or not, in every dialect; the node keeps serving`, async (t) => {
  const { api } = await startChatNode(t, {}, { contextLength: 4096 })
  const cases: Array<[string, object, string, 'openai' | 'anthropic']> = [
    // Anthropic Messages
    ['/v1/messages', { ...anthropic, messages: [{ role: 'user', content: 'Hi' }], tools: [{ ...weather, input_schema: { type: 'object', properties: deep } }] }, 'tools.0.input_schema', 'anthropic'],
    ['/v1/messages', { ...anthropic, messages: [toolTurn[0], { role: 'assistant', content: [{ type: 'tool_use', id: 'call_1', name: 'get_weather', input: { city: deep } }] }, toolTurn[2]], tools: [weather] }, 'messages.1.content.0.input', 'anthropic'],
    ['/v1/messages/count_tokens', { model: TINY_MODEL_ID, messages: [toolTurn[0], { role: 'assistant', content: [{ type: 'tool_use', id: 'call_1', name: 'get_weather', input: { city: deep } }] }, toolTurn[2]], tools: [weather] }, 'messages.1.content.0.input', 'anthropic'],
    // OpenAI chat completions
    ['/v1/chat/completions', { ...chat, messages: [chatTurn[0]], tools: [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: deep } } }] }, 'tools.0.function.parameters', 'openai'],
    ['/v1/chat/completions', { ...chat, messages: [chatTurn[0]], response_format: { type: 'json_schema', json_schema: { name: 'n', schema: { type: 'object', properties: deep } } } }, 'response_format.json_schema.schema', 'openai'],
    ['/v1/chat/completions', { ...chat, messages: [chatTurn[0], { ...chatTurn[1], tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: nested(DEEP) } }] }, chatTurn[2]] }, 'messages.1.tool_calls.0.function.arguments', 'openai'],
    // OpenAI Responses
    ['/v1/responses', { ...responses, input: 'Hi', tools: [{ type: 'web_search', filters: deep }] }, 'tools.0.filters', 'openai'],
    ['/v1/responses', { ...responses, input: 'Hi', tools: [{ type: 'function', name: 'get_weather', parameters: { type: 'object', properties: deep } }] }, 'tools.0.parameters', 'openai'],
    ['/v1/responses', { ...responses, input: 'Hi', text: { format: { type: 'json_schema', name: 'n', schema: { type: 'object', properties: deep } } } }, 'text.format.schema', 'openai'],
    ['/v1/responses', { ...responses, input: 'Hi', tools: [{ type: 'function', name: 'get_weather' }], tool_choice: { type: 'allowed_tools', mode: 'auto', tools: [{ type: 'function', name: 'get_weather' }], extra: deep } }, 'tool_choice.extra', 'openai'],
    ['/v1/responses', { ...responses, input: [responsesTurn[0], { ...responsesTurn[1], arguments: nested(DEEP) }, responsesTurn[2]] }, 'input.1.arguments', 'openai']
  ]
  for (const [path, body, param, dialect] of cases) {
    const streams = path.endsWith('count_tokens') ? [undefined] : [false, true]
    for (const stream of streams) {
      const sent = stream == null ? body : { ...body, stream }
      const what = `${path} ${param}, stream ${String(stream)}`
      if (JSON.stringify(sent).includes(PLACEHOLDER)) assertRefused(await postWith(api, path, sent), param, dialect, what)
      else assertRefused(await api.post(path, sent), param, dialect, what)
    }
  }

  // At the limit a value is taken: a tool of a kind that cannot run here is echoed back as sent
  const atLimit = await postWith(api, '/v1/responses', { ...responses, input: 'Hi', tools: [{ type: 'web_search', filters: deep }] }, nested(MAX_JSON_DEPTH))
  assert.equal(atLimit.status, 200, JSON.stringify(atLimit.body))
  assert.equal(JSON.stringify(atLimit.body.tools[0].filters), nested(MAX_JSON_DEPTH))
  assertRefused(await postWith(api, '/v1/responses', { ...responses, input: 'Hi', tools: [{ type: 'web_search', filters: deep }] }, nested(MAX_JSON_DEPTH + 1)), 'tools.0.filters', 'openai', 'one level over')
  // Plain text that only looks deep is a tool's result as any other text
  const text = await api.post('/v1/chat/completions', { ...chat, messages: [chatTurn[0], chatTurn[1], { ...chatTurn[2], content: `${'['.repeat(MAX_JSON_DEPTH + 10)} not JSON` }] })
  assert.equal(text.status, 200, JSON.stringify(text.body))
  // And the node answers as before
  const ok = await api.post('/v1/chat/completions', { ...chat, messages: chatTurn, tools: [{ type: 'function', function: { name: 'get_weather', parameters: weather.input_schema } }] })
  assert.equal(ok.status, 200, JSON.stringify(ok.body))
})

test(`a tool's result nested ${TOOL_RESULT_DEPTH} levels (a tool may return an AST) is shown to the model as plain text, in every dialect, streamed or not`, async (t) => {
  // Deep enough to overflow the stack of the chat template's walk, were it read as JSON
  const { api } = await startChatNode(t, { contextSize: 16_384, slots: 1 }, { contextLength: 16_384 })
  const result = nested(TOOL_RESULT_DEPTH)
  const results: Array<[string, object]> = [
    ['/v1/messages', { ...anthropic, messages: [toolTurn[0], toolTurn[1], { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'call_1', content: result }] }], tools: [weather] }],
    ['/v1/messages', { ...anthropic, messages: [toolTurn[0], toolTurn[1], { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'call_1', content: [{ type: 'text', text: result }] }] }], tools: [weather] }],
    ['/v1/chat/completions', { ...chat, messages: [chatTurn[0], chatTurn[1], { ...chatTurn[2], content: result }] }],
    ['/v1/responses', { ...responses, input: [responsesTurn[0], responsesTurn[1], { ...responsesTurn[2], output: result }] }],
    ['/v1/responses', { ...responses, input: [responsesTurn[0], responsesTurn[1], { ...responsesTurn[2], output: [{ type: 'input_text', text: result }] }] }]
  ]
  for (const [path, body] of results) {
    for (const stream of [false, true]) {
      const res = await fetch(`${api.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ ...body, stream }) })
      assert.equal(res.status, 200, `${path}, stream ${String(stream)}: ${stream ? '' : await res.clone().text()}`)
      if (stream) {
        assert.ok((await collectSse(res)).data.length > 0, path)
      } else {
        // The whole result reached the model: every bracket is in the prompt
        const usage = (await res.json() as { usage: { input_tokens?: number, prompt_tokens?: number, cache_read_input_tokens?: number } }).usage
        const prompt = (usage.input_tokens ?? usage.prompt_tokens ?? 0) + (usage.cache_read_input_tokens ?? 0) // Anthropic counts cache reads apart
        assert.ok(prompt > TOOL_RESULT_DEPTH, `${path}: ${JSON.stringify(usage)}`)
      }
    }
  }
})

test('a stream whose headers cannot be written: the error envelope instead, and the generation is stopped', async (t) => {
  // Unreachable from a request (names are checked first); a generation served by a peer named with a newline stands in
  let stopped = 0
  const generation = (): RoutedGeneration => {
    const events: ChatEvent[] = [
      { type: 'delta', text: 'hi' },
      { type: 'done', finishReason: 'stop', usage: { promptTokens: 1, completionTokens: 1, totalTokens: 2, cachedTokens: 0 } }
    ]
    return {
      servedBy: 'peer:bad\nname',
      events: {
        next: async () => { const value = events.shift(); return value == null ? { done: true, value: undefined } : { done: false, value } },
        return: async () => { stopped++; return { done: true, value: undefined } }
      }
    }
  }
  const router: ChatRouter = { route: () => generation(), models: () => [] }
  const app = await bareHttpApp(t, { router })
  await app.listen({ port: 0, host: '127.0.0.1' })
  const { port } = app.server.address() as { port: number }
  for (const stream of [true, false]) {
    const res = await fetch(`http://127.0.0.1:${port}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'm', max_tokens: 2, stream, messages: [{ role: 'user', content: 'Hi' }] }),
      signal: AbortSignal.timeout(30_000)
    })
    const body = await res.json() as { error: { type: string } }
    assert.equal(res.status, 500, JSON.stringify(body))
    assert.equal(body.error.type, 'internal_error')
    assert.equal(res.headers.get('x-served-by'), null)
  }
  assert.equal(stopped, 1, 'the streamed generation was stopped; the other ran to its end')

  // A generation still evaluating its prompt when the stream fails to open: the client is answered at once, and the
  // generation stops at its first event
  let release = (): void => {}
  const evaluating = new Promise<void>((resolve) => { release = resolve })
  let ended = false
  async function * slow (): AsyncGenerator<ChatEvent, void> {
    try {
      await evaluating
      yield { type: 'delta', text: 'late' }
      yield { type: 'delta', text: 'never sent' }
    } finally {
      ended = true
    }
  }
  router.route = () => ({ servedBy: 'peer:bad\nname', events: slow() })
  const res = await fetch(`http://127.0.0.1:${port}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'm', max_tokens: 2, stream: true, messages: [{ role: 'user', content: 'Hi' }] }),
    signal: AbortSignal.timeout(60_000)
  })
  assert.equal(res.status, 500, 'answered while the generation is still on its prompt')
  release()
  await waitFor(() => ended, { what: 'the generation to stop after its first event' })
})

test('JSON Schemas whose grammar or output check would not end: answered or refused, and the node keeps serving', async (t) => {
  const { api } = await startChatNode(t, {}, { contextLength: 4096 })
  const chat = (schema: object, extra: object = {}): Promise<ApiResponse> => api.post('/v1/chat/completions', {
    model: TINY_MODEL_ID, messages: [{ role: 'user', content: 'Answer in JSON.' }], max_tokens: 32, temperature: 0, ...extra,
    response_format: { type: 'json_schema', json_schema: { name: 'answer', schema } }
  })
  // Bounds too close for their magnitude once looped forever before the request was queued
  const close = await chat({ type: 'object', properties: { v: { type: 'number', exclusiveMinimum: 1_000_000, maximum: 1_000_000.00000001 } }, required: ['v'] })
  // The grammar cannot hold such bounds, so the answer is checked: it holds to them, or is refused as breaking its schema
  assert.ok([200, 503].includes(close.status), JSON.stringify(close.body))
  if (close.status === 503) assert.match(close.body.error.message, /breaks its schema: answer\.v is/)
  const equal = await chat({ type: 'object', properties: { v: { type: 'number', minimum: 1, maximum: 1 } }, required: ['v'] })
  assert.equal(equal.status, 200, JSON.stringify(equal.body))
  assert.equal(JSON.parse(equal.body.choices[0].message.content).v, 1)
  // A pattern that backtracks without end on the answer, streamed and not: the answer ends, as an answer or an error
  const slow = { type: 'object', properties: { text: { type: 'string', pattern: '^' + '.*'.repeat(12) + '!$' } }, required: ['text'] }
  const answered = await chat(slow, { max_tokens: 64 })
  assert.ok([200, 503].includes(answered.status), JSON.stringify(answered.body))
  if (answered.status === 503) assert.match(answered.body.error.message, /breaks its schema/)
  const streamed = await fetch(`${api.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: TINY_MODEL_ID, messages: [{ role: 'user', content: 'Answer in JSON.' }], max_tokens: 64, stream: true, response_format: { type: 'json_schema', json_schema: { name: 'answer', schema: slow } } })
  })
  assert.equal(streamed.status, 200)
  const { data } = await collectSse(streamed)
  assert.equal(data.at(-1), '[DONE]')
  // Bounds whose grammar llama.cpp would spend seconds and hundreds of MB writing out: those past the grammar's budget
  // are checked on the output instead, answered or refused as breaking the schema
  const properties = Object.fromEntries(Array.from({ length: 1000 }, (_, i) => [`p${i}`, { type: 'string', maxLength: 1000 - (i % 500) }]))
  const big = await chat({ type: 'object', properties })
  assert.ok([200, 503].includes(big.status), JSON.stringify(big.body))
  if (big.status === 503) assert.match(big.body.error.message, /breaks its schema/)
  const tools = await api.post('/v1/chat/completions', {
    model: TINY_MODEL_ID, messages: [{ role: 'user', content: 'Hi' }], max_tokens: 8,
    // Fewer properties, each shown to the model, still past the budget
    tools: [{ type: 'function', function: { name: 'fill', parameters: { type: 'object', properties: Object.fromEntries(Object.entries(properties).slice(0, 40)) } } }]
  })
  assert.ok([200, 503].includes(tools.status), JSON.stringify(tools.body))
  // Listed values cannot be checked on the output: past the budget, or too many where the answer starts, refused by name
  const values = (n: number, tag: string): string[] => Array.from({ length: n }, (_, i) => `value_${i}${tag}`)
  const listed = await chat({ type: 'object', properties: Object.fromEntries(Array.from({ length: 9 }, (_, i) => [`p${i}`, { enum: values(1000, `_${i}`) }])) })
  assert.equal(listed.status, 400, JSON.stringify(listed.body))
  assert.equal(listed.body.error.param, 'response_format.json_schema.schema.properties.p8.enum')
  const many = await chat({ enum: values(5000, '') })
  assert.equal(many.status, 400, JSON.stringify(many.body))
  assert.match(many.body.error.message, /lists 5000 values; constrained output takes at most 1024/)
  // anyOfs of $refs nested thirty deep: 4^30 ways llama.cpp would set up where the answer starts
  const $defs = Object.fromEntries(Array.from({ length: 30 }, (_, i) => [`d${i}`, { anyOf: Array.from({ length: 4 }, () => ({ $ref: `#/$defs/d${i + 1}` })) }]))
  const nested = await chat({ $ref: '#/$defs/d0', $defs: { ...$defs, d30: { type: 'integer' } } })
  assert.equal(nested.status, 400, JSON.stringify(nested.body))
  assert.match(nested.body.error.message, /alternatives at one place/)
  assert.equal((await api.get('/health')).status, 200)
})

test('a stack overflow in the node\'s own code is its fault: a 500, never a 400 blaming the request', async (t) => {
  // Every value a client sends is bounded where it enters (above); a RangeError past that is a bug of ours
  const overflow = (): never => { const recurse = (n: number): number => recurse(n + 1) + 1; recurse(0); throw new Error('unreachable') }
  const router: ChatRouter = { route: overflow, models: () => [] }
  const app = await bareHttpApp(t, { router })
  await app.listen({ port: 0, host: '127.0.0.1' })
  const { port } = app.server.address() as { port: number }
  const res = await fetch(`http://127.0.0.1:${port}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'm', max_tokens: 2, messages: [{ role: 'user', content: 'Hi' }] }),
    signal: AbortSignal.timeout(30_000)
  })
  const body = await res.json() as { error: { type: string, message: string } }
  assert.equal(res.status, 500, JSON.stringify(body))
  assert.equal(body.error.type, 'internal_error')
  assert.doesNotMatch(body.error.message, /call stack/, 'the stack is the log\'s, not the client\'s')
})
