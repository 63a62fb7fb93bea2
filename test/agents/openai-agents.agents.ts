// The OpenAI Agents SDK, the real library from npm, unchanged but for its client, pointed at `meshnode serve` the
// documented way (setDefaultOpenAIClient): an Agent with one function tool, its parameters a zod schema, run with
// run(), speaks the Responses API (the SDK's default) and the run finishes; made to call its tool, the tool runs and
// the run goes on with its output (a second request carrying the function_call and its function_call_output).
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { existsSync } from 'node:fs'
import { join } from 'node:path'
import type { z as zod } from 'zod'
import { spawnNodeProcess, tempDir, waitFor, type NodeProcess } from '../support/node.ts'
import { writeTinyGguf } from '../support/tiny-gguf.ts'
import { agentLibraryManifest, importFromAgents } from './agents.ts'

// The SDK's default tracing exports every run to OpenAI's servers; its documented switch turns that off
process.env.OPENAI_AGENTS_DISABLE_TRACING = '1'

/** The few parts of the SDK this test calls (its types live in .agents/, outside this project's reach). */
interface AgentsSdk {
  Agent: new (config: { name: string, instructions: string, model: string, tools: unknown[], modelSettings?: { toolChoice?: 'auto' | 'required' } }) => object
  tool: <T>(options: { name: string, description: string, parameters: zod.ZodType<T>, execute: (input: T) => string | Promise<string> }) => unknown
  run: (agent: object, input: string, options?: { maxTurns?: number }) => Promise<{ finalOutput?: unknown, newItems: Array<{ type: string }>, rawResponses: unknown[] }>
  setDefaultOpenAIClient: (client: object) => void
}
type OpenAIClass = new (options: { baseURL: string, apiKey: string }) => object

const NOT_INSTALLED = existsSync(agentLibraryManifest('openaiAgents')) ? false : 'the OpenAI Agents SDK is not installed: npm run test:agents installs it'

/** The SDK, with its own `openai` client and `zod` (those it was installed with), and its default client set to `node`. */
async function agentsFor (node: NodeProcess): Promise<{ sdk: AgentsSdk, z: typeof zod }> {
  const sdk = await importFromAgents('@openai/agents') as AgentsSdk
  const { default: OpenAI } = await importFromAgents('openai') as { default: OpenAIClass }
  const { z } = await importFromAgents('zod') as { z: typeof zod }
  // The key is sent as a bearer token, which the node ignores while network access is off
  sdk.setDefaultOpenAIClient(new OpenAI({ baseURL: `${node.url}/v1`, apiKey: 'sk-unused-while-network-access-is-off' }))
  return { sdk, z }
}

const instructions = 'Answer questions about the weather; use get_weather.'

test('an Agent with a function tool, run() against the node, finishes; made to call the tool, the tool runs', { skip: NOT_INSTALLED }, async (t) => {
  const dir = await tempDir(t, 'meshnode-agent-')
  // End tokens get weights: an answer ends by itself, as a real model's does (the SDK sets no max_output_tokens)
  const model = await writeTinyGguf(join(dir, 'agent.gguf'), { seed: 7, contextLength: 8192, unruly: true })
  const node = await spawnNodeProcess(t, ['--data-dir', join(dir, 'data'), '--model', model.path, '--context-size', '8192'])
  // One client for the whole process: the SDK's default provider keeps the first default client it is given
  const { sdk, z } = await agentsFor(node)
  const calls: string[] = []
  const weather = sdk.tool({
    name: 'get_weather',
    description: 'The current weather in a city',
    parameters: z.object({ city: z.string() }),
    execute: ({ city }) => { calls.push(city); return `It is sunny in ${city}.` }
  })

  await t.test('with the SDK\'s defaults, the run finishes without an error', async () => {
    const agent = new sdk.Agent({ name: 'Weather', instructions, model: 'agent', tools: [weather] })
    const result = await sdk.run(agent, 'What is the weather in Paris?')
    assert.equal(typeof result.finalOutput, 'string')
    assert.ok(result.rawResponses.length >= 1)
    // The tiny model may or may not call the tool; every call it made ran
    assert.equal(result.newItems.filter((item) => item.type === 'tool_call_output_item').length, calls.length)
    await waitFor(() => /"path":"\/v1\/responses","status":200/.test(node.output()), { what: 'the node to log the answered request' })
  })

  await t.test('toolChoice required: the tool runs, and the run goes on with its output and finishes', async () => {
    calls.length = 0
    // After a call the SDK sets tool_choice back to auto (resetToolChoice, its default), so the model can answer
    const agent = new sdk.Agent({ name: 'Weather', instructions, model: 'agent', tools: [weather], modelSettings: { toolChoice: 'required' } })
    const result = await sdk.run(agent, 'What is the weather in Paris?')
    assert.ok(calls.length >= 1, 'the tool ran')
    assert.ok(calls.every((city) => typeof city === 'string'), 'its arguments matched its zod schema')
    const types = result.newItems.map((item) => item.type)
    assert.deepEqual(types.slice(0, 2), ['tool_call_item', 'tool_call_output_item'])
    assert.ok(result.rawResponses.length >= 2, 'the tool\'s output went back to the model')
    assert.equal(typeof result.finalOutput, 'string')
  })
})
