// Anthropic's Messages and OpenAI's Responses, asked of a node that has no model, served by peers through the relay:
// the dialects are translators at the asking node's edge, and the peer runs the one chat request. A reasoning model's
// thought travels apart from its answer (infer 1.2.0).
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { join } from 'node:path'
import Anthropic from '@anthropic-ai/sdk'
import OpenAI from 'openai'
import { startTestNode, tempDir } from '../support/node.ts'
import { FAST_NETWORK, startTestRelay, waitForPeers, wanSettings } from '../support/network.ts'
import { writeTinyGguf } from '../support/tiny-gguf.ts'
import { assertValidArguments, WEATHER } from '../support/tools.ts'

test('a Messages and a Responses request with a tool call each, and a thought, served by peers through the relay', async (t) => {
  const relay = await startTestRelay(t)
  const dir = await tempDir(t, 'meshnode-model-')
  const chat = await writeTinyGguf(join(dir, 'tiny.gguf'), { seed: 7, contextLength: 4096 })
  const thinker = await writeTinyGguf(join(dir, 'thinker.gguf'), { seed: 7, contextLength: 4096, thinking: true })
  const start = async (): Promise<Awaited<ReturnType<typeof startTestNode>>> => {
    const node = await startTestNode(t, { network: FAST_NETWORK, p2pListen: [], contextSize: 4096 })
    assert.equal((await node.api.patch('/v1/app/settings', wanSettings(relay))).status, 200)
    return node
  }
  const [asking, tools, thinking] = await Promise.all([start(), start(), start()])
  await tools.node.engine.load('tiny-chat', chat.path)
  await thinking.node.engine.load('thinker', thinker.path)
  await waitForPeers(asking, [tools.nodeID, thinking.nodeID], { timeoutMs: 120_000 })

  const anthropic = new Anthropic({ baseURL: asking.node.url, apiKey: 'unused', maxRetries: 0, timeout: 300_000 })
  const tool: Anthropic.Tool = { name: WEATHER.function.name, description: WEATHER.function.description, input_schema: WEATHER.function.parameters as Anthropic.Tool.InputSchema }
  const { data: message, response } = await anthropic.messages.create({
    model: 'tiny-chat', max_tokens: 200, messages: [{ role: 'user', content: 'Weather in Lima?' }], tools: [tool], tool_choice: { type: 'tool', name: tool.name }
  }).withResponse()
  assert.equal(response.headers.get('x-served-by'), `peer:${tools.nodeID}`)
  assert.equal(message.stop_reason, 'tool_use')
  const use = message.content.find((block) => block.type === 'tool_use')
  assert.ok(use?.type === 'tool_use')
  assertValidArguments('get_weather', JSON.stringify(use.input))

  const openai = new OpenAI({ baseURL: `${asking.node.url}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 300_000 })
  const { data: answer, response: served } = await openai.responses.create({
    model: 'tiny-chat', input: 'Weather in Lima?', max_output_tokens: 200, tools: [{ type: 'function', ...WEATHER.function, strict: false } as OpenAI.Responses.FunctionTool], tool_choice: { type: 'function', name: 'get_weather' }
  }).withResponse()
  assert.equal(served.headers.get('x-served-by'), `peer:${tools.nodeID}`)
  const call = answer.output.find((item) => item.type === 'function_call')
  assert.ok(call?.type === 'function_call', JSON.stringify(answer.output))
  assertValidArguments('get_weather', call.arguments)

  // A thought budget asks on 1.2.0: the thought comes apart from the answer
  const greedy = { model: 'thinker', max_tokens: 40, temperature: 0, messages: [{ role: 'user' as const, content: 'Hi' }], thinking: { type: 'enabled' as const, budget_tokens: 12 } }
  const thought = await anthropic.messages.create(greedy)
  assert.deepEqual(thought.content.map((block) => block.type), ['thinking', 'text'])
  const local = await new Anthropic({ baseURL: thinking.node.url, apiKey: 'unused', maxRetries: 0 }).messages.create(greedy)
  assert.deepEqual(thought.content, local.content, 'the peer path changes nothing in the answer')

  // A prompt past the peer's context is told as one past this node's would be: the clients compact on it
  const tooLong = Array.from({ length: 6000 }, (_, i) => ['question', 'network', 'answer', 'people'][i % 4]).join(' ')
  await assert.rejects(anthropic.messages.create({ model: 'tiny-chat', max_tokens: 4, messages: [{ role: 'user', content: tooLong }] }), (err: unknown) =>
    err instanceof Anthropic.BadRequestError && /^prompt is too long: \d+ tokens > 4094 maximum$/.test((err.error as { error?: { message?: string } } | undefined)?.error?.message ?? ''))
  await assert.rejects(openai.responses.create({ model: 'tiny-chat', input: tooLong, max_output_tokens: 4 }), (err: unknown) =>
    err instanceof OpenAI.BadRequestError && err.code === 'context_length_exceeded' && err.param === 'input')
})
