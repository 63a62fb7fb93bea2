import { test } from 'node:test'
import assert from 'node:assert/strict'
import OpenAI from 'openai'
import { collectSse, startChatNode, TINY_MODEL_ID } from '../support/chat-node.ts'
import { startTestNode, waitFor } from '../support/node.ts'

const hello = [{ role: 'user' as const, content: 'Tell me a story about a cat.' }]

test('non-streaming completion through the official openai client: shape, real usage, X-Served-By local', async (t) => {
  const { openai } = await startChatNode(t)
  const { data: completion, response } = await openai.chat.completions.create({
    model: TINY_MODEL_ID, messages: hello, max_tokens: 12, temperature: 0
  }).withResponse()
  assert.equal(response.headers.get('x-served-by'), 'local')
  assert.match(completion.id, /^chatcmpl-/)
  assert.equal(completion.object, 'chat.completion')
  assert.equal(completion.model, TINY_MODEL_ID)
  assert.ok(Math.abs(completion.created - Date.now() / 1000) < 60)
  assert.equal(completion.choices.length, 1)
  const choice = completion.choices[0]
  assert.equal(choice.index, 0)
  assert.equal(choice.message.role, 'assistant')
  assert.ok((choice.message.content ?? '').length > 0)
  assert.equal(choice.finish_reason, 'length')
  assert.equal(completion.usage?.completion_tokens, 12)
  assert.ok((completion.usage?.prompt_tokens ?? 0) > 5, 'the prompt is counted as the chat template renders it')
  assert.equal(completion.usage?.total_tokens, (completion.usage?.prompt_tokens ?? 0) + 12)
})

test('the node\'s flashAttention setting (serve --flash-attention) reaches llama.cpp, and the node answers with it on', async (t) => {
  const { node, openai } = await startChatNode(t, { flashAttention: 'on' })
  // node-llama-cpp's getter reports what the engine asked llama.cpp for (on the CPU the default, auto, is false).
  const answer = await openai.chat.completions.create({ model: TINY_MODEL_ID, messages: [{ role: 'user', content: 'hi' }], max_tokens: 8, temperature: 0 })
  assert.equal(answer.usage?.completion_tokens, 8)
  const loaded = (node.engine as unknown as { models: Map<string, { context: { flashAttention: boolean | 'auto' } | null }> }).models.get(TINY_MODEL_ID)
  assert.equal(loaded?.context?.flashAttention, true)
})

test('streaming: role chunk first, content deltas, a finish chunk, the usage chunk, [DONE]', async (t) => {
  const { openai, node } = await startChatNode(t)
  const stream = await openai.chat.completions.create({
    model: TINY_MODEL_ID, messages: hello, max_tokens: 10, temperature: 0, stream: true, stream_options: { include_usage: true }
  })
  const chunks: OpenAI.Chat.Completions.ChatCompletionChunk[] = []
  for await (const chunk of stream) chunks.push(chunk)
  assert.deepEqual(chunks[0].choices[0].delta, { role: 'assistant', content: '' })
  const contentChunks = chunks.filter((c) => c.choices[0]?.delta.content != null && c.choices[0].delta.content !== '')
  assert.ok(contentChunks.length >= 2, 'content arrives as several deltas')
  const finish = chunks.find((c) => c.choices[0]?.finish_reason != null)
  assert.equal(finish?.choices[0].finish_reason, 'length')
  const last = chunks.at(-1)
  assert.deepEqual(last?.choices, [])
  assert.equal(last?.usage?.completion_tokens, 10)
  assert.ok(chunks.every((c) => c.id === chunks[0].id && c.object === 'chat.completion.chunk'))

  // The streamed text is the same text a non-streamed request with the same settings gets.
  const streamed = contentChunks.map((c) => c.choices[0].delta.content).join('')
  const whole = await openai.chat.completions.create({ model: TINY_MODEL_ID, messages: hello, max_tokens: 10, temperature: 0 })
  assert.equal(streamed, whole.choices[0].message.content)

  // On the wire: the served-by header and the [DONE] terminator.
  const raw = await fetch(`${node.url}/v1/chat/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: TINY_MODEL_ID, messages: hello, max_tokens: 3, stream: true })
  })
  assert.equal(raw.headers.get('x-served-by'), 'local')
  assert.match(raw.headers.get('content-type') ?? '', /^text\/event-stream/)
  const { data } = await collectSse(raw)
  assert.equal(data.at(-1), '[DONE]')
  assert.ok(!data.slice(0, -1).some((d) => 'usage' in JSON.parse(d)), 'no usage field unless asked for')
})

test('sampling parameters: seed and temperature reproduce; top_p, top_k, penalties and user are honoured', async (t) => {
  const { openai } = await startChatNode(t)
  const ask = async (params: Record<string, unknown>): Promise<string> => {
    const completion = await openai.chat.completions.create({ model: TINY_MODEL_ID, messages: hello, max_tokens: 16, ...params })
    return completion.choices[0].message.content ?? ''
  }
  const seeded = await ask({ temperature: 1, seed: 42 })
  assert.equal(await ask({ temperature: 1, seed: 42 }), seeded, 'same seed, same text')
  const seeds = new Set(await Promise.all([1, 2, 3, 4].map((seed) => ask({ temperature: 1.5, seed }))))
  assert.ok(seeds.size > 1, 'different seeds sample differently')
  const greedy = await ask({ temperature: 0 })
  assert.equal(await ask({ temperature: 0, seed: 9 }), greedy, 'temperature 0 is greedy whatever the seed')
  assert.equal(await ask({ temperature: 1.5, top_k: 1, seed: 5 }), greedy, 'top_k 1 is greedy')
  assert.equal(await ask({ temperature: 1.5, top_p: 0.000001, seed: 5 }), greedy, 'a tiny top_p is greedy')
  // Negative penalties favour tokens already generated, so greedy decoding starts repeating itself.
  const penalised = await ask({ temperature: 0, frequency_penalty: -2, presence_penalty: -2 })
  assert.notEqual(penalised, greedy, 'penalties change what greedy decoding picks')
  assert.equal(await ask({ temperature: 0, user: 'user-1234' }), greedy)
})

test('max_tokens, max_completion_tokens and stop (string or array) bound the answer', async (t) => {
  const { openai } = await startChatNode(t)
  const full = await openai.chat.completions.create({ model: TINY_MODEL_ID, messages: hello, max_tokens: 24, temperature: 0 })
  const text = full.choices[0].message.content ?? ''
  const short = await openai.chat.completions.create({ model: TINY_MODEL_ID, messages: hello, max_completion_tokens: 4, temperature: 0 })
  assert.equal(short.usage?.completion_tokens, 4)
  assert.ok(text.startsWith(short.choices[0].message.content ?? '\u0000'))

  // A word from the middle of the greedy answer as the stop string: the answer ends just before it.
  const words = text.trim().split(/\s+/)
  const stopWord = words[Math.floor(words.length / 2)]
  const cut = text.indexOf(stopWord)
  for (const stop of [stopWord, ['never-appears', stopWord]]) {
    const stopped = await openai.chat.completions.create({ model: TINY_MODEL_ID, messages: hello, max_tokens: 24, temperature: 0, stop })
    assert.equal(stopped.choices[0].finish_reason, 'stop')
    assert.equal(stopped.choices[0].message.content, text.slice(0, cut))
    assert.ok(!(stopped.choices[0].message.content ?? '').includes(stopWord))
  }
})

test('response_format json_schema answers JSON that fits the schema; json_object starts a JSON object', async (t) => {
  const { openai } = await startChatNode(t)
  const completion = await openai.chat.completions.create({
    model: TINY_MODEL_ID, messages: hello, max_tokens: 40, temperature: 0,
    response_format: { type: 'json_schema', json_schema: { name: 'n', schema: { type: 'object', properties: { a: { type: 'integer' } }, required: ['a'] } } }
  })
  const parsed = JSON.parse(completion.choices[0].message.content ?? '')
  assert.equal(typeof parsed.a, 'number')
  const object = await openai.chat.completions.create({ model: TINY_MODEL_ID, messages: hello, max_tokens: 8, temperature: 0, response_format: { type: 'json_object' } })
  assert.match(object.choices[0].message.content ?? '', /^\s*\{/)
})

test('text-part array content is the same as string content; developer is a system message', async (t) => {
  const { openai } = await startChatNode(t)
  const asString = await openai.chat.completions.create({ model: TINY_MODEL_ID, messages: [{ role: 'system', content: 'Be brief.' }, ...hello], max_tokens: 8, temperature: 0 })
  const asParts = await openai.chat.completions.create({
    model: TINY_MODEL_ID, max_tokens: 8, temperature: 0,
    messages: [{ role: 'developer', content: [{ type: 'text', text: 'Be brief.' }] }, { role: 'user', content: [{ type: 'text', text: hello[0].content }] }]
  })
  assert.equal(asParts.choices[0].message.content, asString.choices[0].message.content)
})

test('image, audio and file parts are read as a placeholder: an agent that sent one goes on with its session', async (t) => {
  const { node } = await startChatNode(t)
  const openai = new OpenAI({ baseURL: `${node.url}/v1`, apiKey: 'unused', maxRetries: 0 })
  const ask = async (content: OpenAI.Chat.Completions.ChatCompletionContentPart[]): Promise<number> =>
    (await openai.chat.completions.create({ model: TINY_MODEL_ID, max_tokens: 1, messages: [{ role: 'user', content }] })).usage?.prompt_tokens ?? 0
  const withMedia = await ask([
    { type: 'text', text: 'What is this?' },
    { type: 'image_url', image_url: { url: 'data:image/png;base64,iVBORw0KGgo=' } },
    { type: 'input_audio', input_audio: { data: 'UklGRg==', format: 'wav' } },
    { type: 'file', file: { filename: 'report.pdf', file_data: 'data:application/pdf;base64,JVBERi0=' } }
  ])
  // What the model reads is exactly the placeholders, written as text
  const asText = await ask([
    { type: 'text', text: 'What is this?' },
    { type: 'text', text: '[image omitted: this model reads text only]' },
    { type: 'text', text: '[audio omitted: this model reads text only]' },
    { type: 'text', text: '[file report.pdf omitted: this model reads text only]' }
  ])
  assert.ok(withMedia > 0)
  assert.equal(withMedia, asText)
})

test('parameters it cannot honour, and malformed requests, are refused with 400 naming the parameter', async (t) => {
  const { node } = await startChatNode(t)
  const base = { model: TINY_MODEL_ID, messages: hello, max_tokens: 4 }
  const cases: Array<[Record<string, unknown>, string]> = [
    [{ ...base, n: 2 }, 'n'],
    [{ ...base, logprobs: true }, 'logprobs'],
    [{ ...base, top_logprobs: 3 }, 'top_logprobs'],
    [{ ...base, tools: [{ type: 'code_interpreter' }] }, 'tools.0.type'],
    [{ ...base, tool_choice: 'auto' }, 'tool_choice'],
    [{ ...base, functions: [{ name: 'f' }] }, 'functions'],
    [{ ...base, logit_bias: { 50: 101 } }, 'logit_bias.50'],
    [{ ...base, logit_bias: { 99999: 1 } }, 'logit_bias.99999'],
    [{ ...base, logit_bias: { banana: 1 } }, 'logit_bias.banana'],
    [{ ...base, messages: [{ role: 'user', content: [{ type: 'video_url', video_url: { url: 'data:,' } }] }] }, 'messages.0.content.0.type'],
    [{ ...base, messages: [{ role: 'tool', content: 'x', tool_call_id: '1' }] }, 'messages.0.tool_call_id'],
    [{ ...base, messages: [{ role: 'function', content: 'x', name: 'f' }] }, 'messages.0.role'],
    [{ ...base, model: undefined }, 'model'],
    [{ ...base, messages: [] }, 'messages'],
    [{ ...base, messages: 'hi' }, 'messages'],
    [{ ...base, messages: [{ role: 'wizard', content: 'x' }] }, 'messages.0.role'],
    [{ ...base, temperature: 'hot' }, 'temperature'],
    [{ ...base, temperature: 3 }, 'temperature'],
    [{ ...base, top_p: 0 }, 'top_p'],
    [{ ...base, max_tokens: 0 }, 'max_tokens'],
    [{ ...base, max_tokens: 1.5 }, 'max_tokens'],
    [{ ...base, stop: ['a', 'b', 'c', 'd', 'e'] }, 'stop'],
    [{ ...base, presence_penalty: 5 }, 'presence_penalty'],
    [{ ...base, response_format: { type: 'xml' } }, 'response_format.type'],
    [{ ...base, stream: 'yes' }, 'stream']
  ]
  for (const [body, param] of cases) {
    const res = await fetch(`${node.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) })
    const json = await res.json() as { error: { type: string, param: string | null, message: string } }
    assert.equal(res.status, 400, `${param}: ${JSON.stringify(json)}`)
    assert.equal(json.error.type, 'invalid_request_error')
    assert.equal(json.error.param, param, JSON.stringify(json))
  }
  // Unknown keys are ignored, as OpenAI does.
  const ok = await fetch(`${node.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ ...base, some_future_option: true }) })
  assert.equal(ok.status, 200)
  // The SDK surfaces our 400 as its BadRequestError.
  const openai = new OpenAI({ baseURL: `${node.url}/v1`, apiKey: 'x', maxRetries: 0 })
  await assert.rejects(openai.chat.completions.create({ ...base, n: 3 }), (err: unknown) => err instanceof OpenAI.BadRequestError && /n > 1/.test(err.message))
})

test('no model loaded, or a model nobody has: 404 naming the model; /v1/models lists the loaded model', async (t) => {
  const empty = await startTestNode(t)
  const openaiEmpty = new OpenAI({ baseURL: `${empty.node.url}/v1`, apiKey: 'x', maxRetries: 0 })
  assert.deepEqual((await openaiEmpty.models.list()).data, [])
  const res = await empty.api.post('/v1/chat/completions', { model: 'qwen-7b', messages: hello })
  assert.equal(res.status, 404)
  assert.equal(res.body.error.type, 'not_found')
  assert.match(res.body.error.message, /qwen-7b.*no model is loaded.*`meshnode models list` shows/)
  assert.doesNotMatch(res.body.error.message, /models download/, 'a name neither the catalog nor the hub knows cannot be downloaded')
  // Ids the catalog or the hub can resolve are worth the command that downloads them
  for (const model of ['smollm2-135m-instruct-q8_0', 'hf.co/acme/tiny-GGUF/tiny.gguf', 'hf.co/acme/tiny-GGUF:Q4_K_M']) {
    const known = await empty.api.post('/v1/chat/completions', { model, messages: hello })
    assert.equal(known.status, 404)
    assert.ok(known.body.error.message.includes(`download it with \`meshnode models download ${model}\``), known.body.error.message)
  }

  const { openai, api } = await startChatNode(t)
  const models = await openai.models.list()
  assert.deepEqual(models.data.map((m) => ({ id: m.id, object: m.object, owned_by: m.owned_by })), [{ id: TINY_MODEL_ID, object: 'model', owned_by: 'local' }])
  const other = await api.post('/v1/chat/completions', { model: 'some-other-model', messages: hello, stream: true })
  assert.equal(other.status, 404, 'an immediate failure keeps its status even when streaming')
  assert.match(other.body.error.message, /some-other-model.*loaded: tiny-chat/)
})

test('beyond the queue: 429 with Retry-After; a client abort frees the slot for the next request', async (t) => {
  // A long context keeps the first request generating while the test fills the queue behind it.
  const { node, openai } = await startChatNode(t, { slots: 1, queueSize: 1, contextSize: 32_768 }, { contextLength: 32_768 })
  // Greedy: the tiny model never picks end-of-generation then, so the request runs until its context is full.
  const long = { model: TINY_MODEL_ID, messages: hello, max_tokens: 100_000, temperature: 0, stream: true as const }
  const running = new AbortController()
  const first = await openai.chat.completions.create(long, { signal: running.signal })
  const firstIterator = first[Symbol.asyncIterator]()
  await firstIterator.next() // the role chunk: the one slot is taken
  const waiting = new AbortController()
  const queued = fetch(`${node.url}/v1/chat/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(long), signal: waiting.signal
  })
  // While it waits for the slot, the queued stream is already open and says so in a comment.
  const queuedResponse = await queued
  assert.equal(queuedResponse.status, 200)
  assert.match(queuedResponse.headers.get('content-type') ?? '', /^text\/event-stream/)
  await waitFor(() => node.engine.stats().queued === 1, { what: 'the second request to queue' })
  const reader = queuedResponse.body?.getReader()
  const opened = new TextDecoder().decode((await reader?.read())?.value)
  assert.match(opened, /^: stream opened\n\n/, 'a comment line keeps the waiting client company before any token')

  const refused = await fetch(`${node.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(long) })
  assert.equal(refused.status, 429)
  assert.equal(refused.headers.get('retry-after'), '1')
  assert.equal(((await refused.json()) as { error: { type: string } }).error.type, 'rate_limit_error')

  running.abort()
  waiting.abort()
  await waitFor(() => node.engine.stats().busySlots === 0 && node.engine.stats().queued === 0, { what: 'aborted requests to free the slot' })
  const next = await openai.chat.completions.create({ model: TINY_MODEL_ID, messages: hello, max_tokens: 3 })
  assert.equal(next.usage?.completion_tokens, 3, 'the following request is served at once')
})

test('a failure mid-stream ends with an OpenAI-shaped error event, then [DONE]', async (t) => {
  const { node } = await startChatNode(t, { contextSize: 32_768 }, { contextLength: 32_768 })
  const response = await fetch(`${node.url}/v1/chat/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: TINY_MODEL_ID, messages: hello, max_tokens: 100_000, temperature: 0, stream: true })
  })
  assert.equal(response.status, 200)
  const reading = collectSse(response)
  await waitFor(() => node.engine.stats().busySlots === 1, { what: 'generation to start' })
  await node.engine.close() // pulls the model out from under the running generation (an unload would let it finish)
  const { data } = await reading
  assert.equal(data.at(-1), '[DONE]')
  const error = JSON.parse(data.at(-2) ?? '{}') as { error?: { type: string, message: string } }
  assert.equal(error.error?.type, 'service_unavailable')
  assert.match(error.error?.message ?? '', /tiny-chat was unloaded/)
})
