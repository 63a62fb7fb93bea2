// Agent-sized prompts: a 20k-token request asking for max_tokens 32000 on a 32k context is answered (the answer is
// bounded by the room left, not refused); one over the context is a 400 naming both sizes, in the words and code each
// dialect's clients act on; and the next request that shares the long prefix evaluates only what is new, on every dialect.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { join } from 'node:path'
import Anthropic from '@anthropic-ai/sdk'
import OpenAI from 'openai'
import { startTestNode, tempDir } from '../support/node.ts'
import { writeTinyGguf } from '../support/tiny-gguf.ts'

const CONTEXT = 32_768

test('a 20k-token prompt with max_tokens 32000 is answered; over the context is a 400 naming both; the prefix is cached on each dialect', async (t) => {
  const dir = await tempDir(t, 'meshnode-model-')
  // End tokens get weights: answers end by themselves, as an agent's model's do
  const { path } = await writeTinyGguf(join(dir, 'agent.gguf'), { seed: 7, contextLength: CONTEXT, unruly: true })
  const { node } = await startTestNode(t, { contextSize: CONTEXT, slots: 1 })
  await node.engine.load('agent', path)
  const openai = new OpenAI({ baseURL: `${node.url}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 600_000 })
  const anthropic = new Anthropic({ baseURL: node.url, apiKey: 'unused', maxRetries: 0, timeout: 600_000 })

  // One token a word in the tiny vocabulary: ~20k tokens of "tools and instructions"
  const system = Array.from({ length: 20_000 }, (_, i) => ['question', 'network', 'answer', 'people'][i % 4]).join(' ')
  const first = await openai.chat.completions.create({ model: 'agent', messages: [{ role: 'system', content: system }, { role: 'user', content: 'hello' }], max_tokens: 32_000 })
  const usage = first.usage
  assert.ok(usage != null && usage.prompt_tokens > 20_000 && usage.prompt_tokens < CONTEXT, JSON.stringify(usage))
  assert.ok(usage.completion_tokens <= CONTEXT - usage.prompt_tokens)
  assert.ok(['stop', 'length'].includes(first.choices[0].finish_reason))

  // The same prefix again, on each dialect: only the new turn is evaluated
  const chat = await openai.chat.completions.create({ model: 'agent', messages: [{ role: 'system', content: system }, { role: 'user', content: 'and now?' }], max_tokens: 4 })
  assert.ok((chat.usage?.prompt_tokens_details?.cached_tokens ?? 0) > 20_000, JSON.stringify(chat.usage))
  const message = await anthropic.messages.create({ model: 'agent', system, max_tokens: 4, messages: [{ role: 'user', content: 'and then?' }] })
  assert.ok((message.usage.cache_read_input_tokens ?? 0) > 20_000, JSON.stringify(message.usage))
  assert.ok(message.usage.input_tokens < 100, 'only the new turn was evaluated')
  const response = await openai.responses.create({ model: 'agent', instructions: system, input: 'and after?', max_output_tokens: 4 })
  assert.ok((response.usage?.input_tokens_details.cached_tokens ?? 0) > 20_000, JSON.stringify(response.usage))

  // Over the context: a 400 naming the prompt's tokens and the context's room, on each dialect
  const tooLong = `${system} ${system}`
  const overChat = await fetch(`${node.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'agent', messages: [{ role: 'user', content: tooLong }], max_tokens: 32_000 }) })
  assert.equal(overChat.status, 400)
  assert.match((await overChat.json() as { error: { message: string } }).error.message, new RegExp(`take \\d{5} tokens; model agent has room for ${CONTEXT - 2} per request`))
  await assert.rejects(anthropic.messages.create({ model: 'agent', max_tokens: 32_000, messages: [{ role: 'user', content: tooLong }] }),
    (err: unknown) => err instanceof Anthropic.BadRequestError && new RegExp(`prompt is too long: \\d{5} tokens > ${CONTEXT - 2} maximum`).test(err.message))
  await assert.rejects(openai.responses.create({ model: 'agent', input: tooLong, max_output_tokens: 32_000 }),
    (err: unknown) => err instanceof OpenAI.BadRequestError && new RegExp(`take \\d{5} tokens; model agent has room for ${CONTEXT - 2}`).test(err.message))
})

test('a prompt over the context is context_length_exceeded on OpenAI\'s routes and "prompt is too long" on Anthropic\'s, streamed or not', async (t) => {
  const dir = await tempDir(t, 'meshnode-model-')
  const { path } = await writeTinyGguf(join(dir, 'small.gguf'), { seed: 7, contextLength: 1024 })
  const { node } = await startTestNode(t, { contextSize: 1024 })
  await node.engine.load('small', path)
  const openai = new OpenAI({ baseURL: `${node.url}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 300_000 })
  const anthropic = new Anthropic({ baseURL: node.url, apiKey: 'unused', maxRetries: 0, timeout: 300_000 })
  const tooLong = Array.from({ length: 1500 }, (_, i) => ['question', 'network', 'answer', 'people'][i % 4]).join(' ')

  // OpenAI's code, which Codex acts on, with the field as each route's client sent it (a 400 where the refusal comes
  // before the stream opens, as here it does at once)
  const overflow = (param: string) => (err: unknown): boolean => {
    assert.ok(err instanceof OpenAI.APIError, String(err))
    assert.equal(err.code, 'context_length_exceeded')
    assert.equal(err.param, param)
    assert.match(err.message, /take \d{4} tokens; model small has room for 1022 per request/)
    return true
  }
  await assert.rejects(openai.chat.completions.create({ model: 'small', messages: [{ role: 'user', content: tooLong }], max_tokens: 4 }), overflow('messages'))
  await assert.rejects(openai.chat.completions.create({ model: 'small', messages: [{ role: 'user', content: tooLong }], max_tokens: 4, stream: true }), overflow('messages'))
  await assert.rejects(openai.responses.create({ model: 'small', input: tooLong, max_output_tokens: 4 }), overflow('input'))
  await assert.rejects(openai.responses.create({ model: 'small', input: tooLong, max_output_tokens: 4, stream: true }), overflow('input'))

  // Anthropic's words, which Claude Code reads to compact its history
  const tooLongForClaude = (err: unknown): boolean => {
    assert.ok(err instanceof Anthropic.APIError, String(err))
    assert.equal(err.type, 'invalid_request_error')
    assert.match(err.apiMessage ?? '', /^prompt is too long: \d{4} tokens > 1022 maximum$/)
    return true
  }
  const request = { model: 'small', max_tokens: 4, messages: [{ role: 'user' as const, content: tooLong }] }
  await assert.rejects(anthropic.messages.create(request), tooLongForClaude)
  await assert.rejects(anthropic.messages.stream(request).finalMessage(), tooLongForClaude)
})
