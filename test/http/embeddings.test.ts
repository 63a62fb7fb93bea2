// POST /v1/embeddings through the official openai client on the tiny GGUF.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { startChatNode, TINY_MODEL_ID } from '../support/chat-node.ts'

const texts = ['the network answers', 'a peer serves the model', 'hello world']

/** Decodes OpenAI's base64 encoding: little-endian float32 values. */
function decode (base64: string): number[] {
  const bytes = Buffer.from(base64, 'base64')
  return Array.from({ length: bytes.length / 4 }, (_, i) => bytes.readFloatLE(i * 4))
}

test('embeddings: one vector per input, equal dimensions, base64 decodes to the float answer, same input same vector', async (t) => {
  const { openai, node } = await startChatNode(t)
  const { data: floats, response } = await openai.embeddings.create({ model: TINY_MODEL_ID, input: texts, encoding_format: 'float' }).withResponse()
  assert.equal(response.headers.get('x-served-by'), 'local')
  assert.equal(floats.object, 'list')
  assert.equal(floats.model, TINY_MODEL_ID)
  assert.deepEqual(floats.data.map((d) => [d.object, d.index]), [['embedding', 0], ['embedding', 1], ['embedding', 2]])
  const length = node.engine.loaded()?.embeddingLength
  assert.ok(length != null && length > 0)
  for (const { embedding } of floats.data) {
    assert.equal(embedding.length, length)
    assert.ok(embedding.every(Number.isFinite))
    // Unit length, as OpenAI's: a dot product is the cosine
    assert.ok(Math.abs(Math.hypot(...embedding) - 1) < 1e-6, `length ${Math.hypot(...embedding)}`)
  }
  assert.notDeepEqual(floats.data[0].embedding, floats.data[1].embedding, 'different inputs, different vectors')
  assert.ok(floats.usage.prompt_tokens > texts.length)
  assert.equal(floats.usage.total_tokens, floats.usage.prompt_tokens)

  // base64, as the Python client asks for by default: the same float32 values.
  const base64 = await openai.embeddings.create({ model: TINY_MODEL_ID, input: texts, encoding_format: 'base64' })
  base64.data.forEach((d, i) => {
    assert.equal(typeof d.embedding, 'string')
    const decoded = decode(d.embedding as unknown as string)
    assert.deepEqual(decoded, floats.data[i].embedding.map((v) => Math.fround(v)))
  })
  // The Node SDK asks for base64 itself when no format is given, and decodes it.
  const sdkDefault = await openai.embeddings.create({ model: TINY_MODEL_ID, input: texts[2] })
  assert.deepEqual(sdkDefault.data[0].embedding, floats.data[2].embedding.map((v) => Math.fround(v)))
  // The same input gives the same vector, alone or in a batch, now or later.
  const again = await openai.embeddings.create({ model: TINY_MODEL_ID, input: [texts[1]], encoding_format: 'float' })
  assert.deepEqual(again.data[0].embedding, floats.data[1].embedding)
  const sameDimensions = await openai.embeddings.create({ model: TINY_MODEL_ID, input: 'x', dimensions: length, encoding_format: 'float' })
  assert.equal(sameDimensions.data[0].embedding.length, length)
  // Embeddings run beside the chat slots: a chat at the same time is served as usual.
  const [chat] = await Promise.all([
    openai.chat.completions.create({ model: TINY_MODEL_ID, messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 }),
    openai.embeddings.create({ model: TINY_MODEL_ID, input: texts })
  ])
  assert.equal(chat.usage?.completion_tokens, 4)
})

test('embedding requests it cannot serve as asked are refused with 400 naming the parameter', async (t) => {
  const { api, node } = await startChatNode(t)
  const length = node.engine.loaded()?.embeddingLength ?? 0
  const cases: Array<[Record<string, unknown>, string, RegExp]> = [
    [{ model: TINY_MODEL_ID, input: [1, 2, 3] }, 'input', /token ids/],
    [{ model: TINY_MODEL_ID, input: [[1, 2], [3]] }, 'input', /token ids/],
    [{ model: TINY_MODEL_ID, input: [] }, 'input', /1 to 2048/],
    [{ model: TINY_MODEL_ID, input: ['fine', ''] }, 'input.1', /non-empty/],
    [{ model: TINY_MODEL_ID, input: ['fine', 'word '.repeat(2000)] }, 'input.1', /tokens/],
    [{ model: TINY_MODEL_ID, input: 'x', dimensions: length + 1 }, 'dimensions', new RegExp(`${length}-dimensional`)],
    [{ model: TINY_MODEL_ID, input: 'x', encoding_format: 'hex' }, 'encoding_format', /./],
    [{ model: TINY_MODEL_ID }, 'input', /./]
  ]
  for (const [body, param, message] of cases) {
    const res = await api.post('/v1/embeddings', body)
    assert.equal(res.status, 400, `${param}: ${JSON.stringify(res.body)}`)
    assert.equal(res.body.error.type, 'invalid_request_error')
    assert.equal(res.body.error.param, param, JSON.stringify(res.body))
    assert.match(res.body.error.message, message)
    // An input past the context is a context overflow as on every route, with OpenAI's code
    assert.equal(res.body.error.code, /tokens/.test(message.source) ? 'context_length_exceeded' : null, JSON.stringify(res.body))
  }
  assert.equal(node.engine.stats().queued, 0)
})
