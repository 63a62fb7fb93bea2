// POST /v1/completions (legacy text completion) through the official openai client on the tiny GGUF.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { join } from 'node:path'
import type OpenAI from 'openai'
import { collectSse, startChatNode, TINY_MODEL_ID } from '../support/chat-node.ts'
import { tempDir } from '../support/node.ts'
import { writeTinyGguf } from '../support/tiny-gguf.ts'

const prompt = 'Once upon a time the network'

test('a text completion: OpenAI\'s shape, real usage, default max_tokens 16; streamed text equals the non-streamed text', async (t) => {
  const { openai, node } = await startChatNode(t)
  const { data: completion, response } = await openai.completions.create({ model: TINY_MODEL_ID, prompt, temperature: 0 }).withResponse()
  assert.equal(response.headers.get('x-served-by'), 'local')
  assert.match(completion.id, /^cmpl-/)
  assert.equal(completion.object, 'text_completion')
  assert.equal(completion.model, TINY_MODEL_ID)
  assert.equal(completion.choices.length, 1)
  assert.equal(completion.choices[0].index, 0)
  assert.equal(completion.choices[0].finish_reason, 'length')
  assert.equal(completion.usage?.completion_tokens, 16, 'OpenAI\'s default max_tokens')
  assert.ok((completion.usage?.prompt_tokens ?? 0) >= 5)
  assert.equal(completion.usage?.total_tokens, (completion.usage?.prompt_tokens ?? 0) + 16)
  const text = completion.choices[0].text
  assert.ok(text.length > 0)
  // No chat template: the prompt is continued, so a chat with the same words answers differently.
  const chat = await openai.chat.completions.create({ model: TINY_MODEL_ID, messages: [{ role: 'user', content: prompt }], max_tokens: 16, temperature: 0 })
  assert.ok((chat.usage?.prompt_tokens ?? 0) > (completion.usage?.prompt_tokens ?? 0), 'the chat template adds tokens')

  const stream = await openai.completions.create({ model: TINY_MODEL_ID, prompt, temperature: 0, stream: true, stream_options: { include_usage: true } })
  const chunks: OpenAI.Completions.Completion[] = []
  for await (const chunk of stream) chunks.push(chunk)
  const pieces = chunks.filter((c) => (c.choices[0]?.text ?? '') !== '')
  assert.ok(pieces.length > 1, 'the text arrives in several chunks')
  assert.equal(pieces.map((c) => c.choices[0].text).join(''), text, 'temperature 0: streamed text = non-streamed text')
  assert.equal(chunks.find((c) => c.choices[0]?.finish_reason != null)?.choices[0].finish_reason, 'length')
  assert.equal(chunks.at(-1)?.usage?.completion_tokens, 16)
  assert.deepEqual(chunks.at(-1)?.choices, [])
  assert.ok(chunks.every((c) => c.id === chunks[0].id && c.object === 'text_completion'))

  // echo puts the prompt first; stop ends the text before the stop string; a list of one prompt is the prompt.
  const echoed = await openai.completions.create({ model: TINY_MODEL_ID, prompt: [prompt], temperature: 0, echo: true })
  assert.equal(echoed.choices[0].text, prompt + text)
  const word = text.trim().split(' ').filter((w) => w.length >= 3)[1]
  assert.ok(word != null, `no usable stop word in ${JSON.stringify(text)}`)
  const stopped = await openai.completions.create({ model: TINY_MODEL_ID, prompt, temperature: 0, stop: word })
  assert.equal(stopped.choices[0].finish_reason, 'stop')
  // node-llama-cpp's text completion drops the space of the token that held the stop string (" she" for "she")
  assert.equal(stopped.choices[0].text.trimEnd(), text.slice(0, text.indexOf(word)).trimEnd())
  const raw = await fetch(`${node.url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: TINY_MODEL_ID, prompt, max_tokens: 3, stream: true }) })
  const { data } = await collectSse(raw)
  assert.equal(data.at(-1), '[DONE]')
})

test('suffix fills in the middle on a model with infill tokens, and is refused with 400 on one without', async (t) => {
  const { openai, api, node } = await startChatNode(t)
  const refused = await api.post('/v1/completions', { model: TINY_MODEL_ID, prompt: 'def hello():', suffix: '    return world' })
  assert.equal(refused.status, 400)
  assert.equal(refused.body.error.param, 'suffix')
  assert.match(refused.body.error.message, /fill-in-the-middle/)

  const { path } = await writeTinyGguf(join(await tempDir(t), 'fim.gguf'), { seed: 7, infill: true })
  await node.engine.load('tiny-fim', path)
  const filled = await openai.completions.create({ model: 'tiny-fim', prompt: 'def hello():', suffix: '    return world', max_tokens: 6, temperature: 0 })
  assert.equal(filled.usage?.completion_tokens, 6)
  const plain = await openai.completions.create({ model: 'tiny-fim', prompt: 'def hello():', max_tokens: 6, temperature: 0 })
  assert.ok((filled.usage?.prompt_tokens ?? 0) > (plain.usage?.prompt_tokens ?? 0), 'the suffix and the infill markers are part of the prompt')
  const emptySuffix = await openai.completions.create({ model: 'tiny-fim', prompt: 'def hello():', suffix: '', max_tokens: 6, temperature: 0 })
  assert.equal(emptySuffix.choices[0].text, plain.choices[0].text, 'an empty suffix is none, as OpenAI reads it')
})

test('completion requests it cannot serve as asked are refused with 400 naming the parameter, and take no slot', async (t) => {
  const { api, node } = await startChatNode(t)
  const base = { model: TINY_MODEL_ID, prompt, max_tokens: 4 }
  const cases: Array<[Record<string, unknown>, string]> = [
    [{ ...base, prompt: undefined }, 'prompt'],
    [{ ...base, prompt: [1, 2, 3] }, 'prompt'],
    [{ ...base, prompt: ['a', 'b'] }, 'prompt'],
    [{ ...base, prompt: 42 }, 'prompt'],
    [{ ...base, prompt: 'word '.repeat(2000) }, 'prompt'],
    [{ ...base, n: 2 }, 'n'],
    [{ ...base, best_of: 2 }, 'best_of'],
    [{ ...base, logprobs: 2 }, 'logprobs'],
    [{ ...base, max_tokens: 0 }, 'max_tokens'],
    [{ ...base, temperature: -1 }, 'temperature'],
    [{ ...base, logit_bias: { 5: 1000 } }, 'logit_bias.5'],
    [{ ...base, stop: ['a', 'b', 'c', 'd', 'e'] }, 'stop'],
    [{ ...base, suffix: 7 }, 'suffix']
  ]
  for (const [body, param] of cases) {
    const res = await api.post('/v1/completions', body)
    assert.equal(res.status, 400, `${param}: ${JSON.stringify(res.body)}`)
    assert.equal(res.body.error.type, 'invalid_request_error')
    assert.equal(res.body.error.param, param, JSON.stringify(res.body))
  }
  assert.deepEqual(node.engine.stats(), { slots: 2, busySlots: 0, queued: 0 })
})
