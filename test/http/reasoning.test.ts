// A reasoning model's thought never reaches its answer: on every dialect it arrives only in the reasoning fields, and
// a thought budget decides how long it may be. The tiny GGUF in a reasoning model's shape (THINKING_TEMPLATE opens
// the model's turn inside a thought) thinks until its budget closes the thought, then answers.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { join } from 'node:path'
import Anthropic from '@anthropic-ai/sdk'
import OpenAI from 'openai'
import { startTestNode, tempDir } from '../support/node.ts'
import { writeTinyGguf } from '../support/tiny-gguf.ts'

const MODEL = 'thinker'
const hello = [{ role: 'user' as const, content: 'Hello, who are you?' }]

async function startThinker (t: Parameters<typeof startTestNode>[0]): Promise<{ openai: OpenAI, anthropic: Anthropic, url: string }> {
  const dir = await tempDir(t, 'meshnode-model-')
  const { path } = await writeTinyGguf(join(dir, 'thinker.gguf'), { seed: 7, thinking: true, contextLength: 4096 })
  const { node } = await startTestNode(t, { contextSize: 4096 })
  assert.equal((await node.engine.load(MODEL, path)).chatTemplate, 'JinjaTemplate')
  return {
    url: node.url,
    openai: new OpenAI({ baseURL: `${node.url}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 300_000 }),
    anthropic: new Anthropic({ baseURL: node.url, apiKey: 'unused', maxRetries: 0, timeout: 300_000 })
  }
}

type ReasoningMessage = OpenAI.Chat.Completions.ChatCompletionMessage & { reasoning_content?: string, reasoning?: string }

test('chat completions: the thought in reasoning_content and reasoning, streamed as deltas; none for effort none; sent back in history', async (t) => {
  const { openai } = await startThinker(t)
  // low: a budget of 1024 thought tokens, then the answer
  const request = { model: MODEL, messages: hello, max_tokens: 1040, temperature: 0, reasoning_effort: 'low' as const }
  const answer = await openai.chat.completions.create(request)
  const message = answer.choices[0].message as ReasoningMessage
  assert.ok((message.reasoning_content ?? '').length > 0, 'a thought')
  assert.equal(message.reasoning, message.reasoning_content)
  assert.ok((message.content ?? '').length > 0, 'an answer after it')
  assert.ok(!(message.content ?? '').includes(message.reasoning_content ?? '\u0000'), 'the thought is not in the answer')
  assert.equal(answer.usage?.completion_tokens, 1040)

  let thought = ''
  let text = ''
  for await (const chunk of await openai.chat.completions.create({ ...request, stream: true })) {
    const delta = chunk.choices[0]?.delta as { content?: string, reasoning_content?: string, reasoning?: string } | undefined
    assert.equal(delta?.reasoning, delta?.reasoning_content)
    thought += delta?.reasoning_content ?? ''
    text += delta?.content ?? ''
  }
  assert.equal(thought, message.reasoning_content)
  assert.equal(text, message.content)

  const none = (await openai.chat.completions.create({ ...request, max_tokens: 16, reasoning_effort: 'none' })).choices[0].message as ReasoningMessage
  assert.equal(none.reasoning_content, undefined, 'a zero budget: no thought')
  assert.ok((none.content ?? '').length > 0)

  // The thought of an earlier turn goes back under either name, and is read (the template shows it)
  const turn = (reasoning: Record<string, string>): OpenAI.Chat.Completions.ChatCompletionMessageParam[] => [
    ...hello, { role: 'assistant', content: 'I am a node.', ...reasoning } as OpenAI.Chat.Completions.ChatCompletionAssistantMessageParam, { role: 'user', content: 'And?' }
  ]
  const plain = await openai.chat.completions.create({ model: MODEL, messages: turn({}), max_tokens: 1, reasoning_effort: 'none' })
  for (const field of ['reasoning_content', 'reasoning']) {
    const withThought = await openai.chat.completions.create({ model: MODEL, messages: turn({ [field]: 'I should greet them kindly.' }), max_tokens: 1, reasoning_effort: 'none' })
    assert.ok((withThought.usage?.prompt_tokens ?? 0) > (plain.usage?.prompt_tokens ?? 0), `${field} was read`)
  }
})

test('Messages: thinking blocks and thinking_delta before the text; budget_tokens bounds them; disabled has none', async (t) => {
  const { anthropic } = await startThinker(t)
  const request = { model: MODEL, max_tokens: 40, temperature: 0, messages: hello, thinking: { type: 'enabled' as const, budget_tokens: 12 } }
  const answer = await anthropic.messages.create(request)
  assert.deepEqual(answer.content.map((block) => block.type), ['thinking', 'text'])
  const [thinking, text] = answer.content
  assert.ok(thinking.type === 'thinking' && thinking.thinking.length > 0)
  assert.ok(text.type === 'text' && text.text.length > 0 && !text.text.includes(thinking.thinking))

  const stream = anthropic.messages.stream(request)
  const deltas: string[] = []
  for await (const event of stream) if (event.type === 'content_block_delta') deltas.push(event.delta.type)
  const final = await stream.finalMessage()
  assert.deepEqual(final.content.map((block) => block.type), ['thinking', 'text'])
  assert.equal(deltas[0], 'thinking_delta')
  assert.ok(deltas.indexOf('text_delta') > deltas.lastIndexOf('thinking_delta'), 'the thought comes whole before the answer')
  assert.deepEqual(final.content, answer.content)

  const disabled = await anthropic.messages.create({ ...request, thinking: { type: 'disabled' } })
  assert.deepEqual(disabled.content.map((block) => block.type), ['text'])
})

test('Responses: a reasoning item before the message; reasoning.effort none has none', async (t) => {
  const { openai } = await startThinker(t)
  const request = { model: MODEL, input: 'Hello, who are you?', max_output_tokens: 1040, temperature: 0, reasoning: { effort: 'low' as const } }
  const answer = await openai.responses.create(request)
  assert.deepEqual(answer.output.map((item) => item.type), ['reasoning', 'message'])
  const reasoning = answer.output[0]
  assert.ok(reasoning.type === 'reasoning' && (reasoning.content?.[0]?.text ?? '').length > 0)
  assert.ok(answer.output_text.length > 0 && !answer.output_text.includes(reasoning.content?.[0]?.text ?? '\u0000'))

  const stream = openai.responses.stream(request)
  const types: string[] = []
  for await (const event of stream) types.push(event.type)
  assert.ok(types.includes('response.reasoning_text.delta'))
  assert.ok(types.indexOf('response.output_text.delta') > types.lastIndexOf('response.reasoning_text.delta'))
  const final = await stream.finalResponse()
  assert.equal(final.output_text, answer.output_text)

  const none = await openai.responses.create({ ...request, max_output_tokens: 16, reasoning: { effort: 'none' } })
  assert.deepEqual(none.output.map((item) => item.type), ['message'])

  // The thought goes back with the history, as the reasoning item came (Codex with store: false) or through
  // previous_response_id, and is read as the thought of the answer after it: the prompt is the one evaluated before
  const next = { model: MODEL, max_output_tokens: 1, reasoning: { effort: 'none' as const } }
  const history = (items: OpenAI.Responses.ResponseOutputItem[]): OpenAI.Responses.ResponseInput =>
    [{ role: 'user', content: request.input }, ...items as OpenAI.Responses.ResponseInputItem[], { role: 'user', content: 'And?' }]
  const inputTokens = async (body: OpenAI.Responses.ResponseCreateParamsNonStreaming): Promise<number> => (await openai.responses.create(body)).usage?.input_tokens ?? 0
  const withThought = await inputTokens({ ...next, input: history(answer.output) })
  const without = await inputTokens({ ...next, input: history(answer.output.filter((item) => item.type !== 'reasoning')) })
  assert.ok(withThought > without, `the reasoning item was read: ${withThought} against ${without} tokens`)
  assert.equal(await inputTokens({ ...next, previous_response_id: answer.id, input: 'And?' }), withThought, 'a stored response keeps its thought')
})
