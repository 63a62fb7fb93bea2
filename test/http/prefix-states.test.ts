// The node keeps long prefixes in <dataDir>/prefix-states: after a restart, the next request sharing an agent's long
// system prompt evaluates only what is new, and says so in usage.prompt_tokens_details.cached_tokens.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { readdir } from 'node:fs/promises'
import { join } from 'node:path'
import OpenAI from 'openai'
import { PREFIX_STATE_MIN_TOKENS } from '../../src/inference/index.ts'
import { startChatNode, TINY_MODEL_ID } from '../support/chat-node.ts'

test('a prefix of the default minimum outlives a restart of the node: the next request reuses it', async (t) => {
  const started = await startChatNode(t, { slots: 1 }, { contextLength: 4096 })
  // One token a word in the tiny vocabulary: an agent's instructions, over the minimum a prefix must hold to be kept
  const system = Array.from({ length: PREFIX_STATE_MIN_TOKENS + 100 }, (_, i) => ['question', 'network', 'answer', 'people'][i % 4]).join(' ')
  const first = await started.openai.chat.completions.create({
    model: TINY_MODEL_ID, messages: [{ role: 'system', content: system }, { role: 'user', content: 'hello' }], max_tokens: 4, temperature: 0
  })
  const prompt = first.usage?.prompt_tokens ?? 0
  assert.ok(prompt > PREFIX_STATE_MIN_TOKENS, JSON.stringify(first.usage))

  const restarted = await started.restart() // the engine closing saves the slot
  assert.ok((await readdir(join(started.dataDir, 'prefix-states'))).some((name) => name.endsWith('.state')))
  await restarted.node.engine.load(TINY_MODEL_ID, started.modelPath)
  const openai = new OpenAI({ baseURL: `${restarted.node.url}/v1`, apiKey: 'sk-local-dummy', maxRetries: 0, timeout: 300_000 })
  const next = await openai.chat.completions.create({
    model: TINY_MODEL_ID, messages: [{ role: 'system', content: system }, { role: 'user', content: 'and now?' }], max_tokens: 4, temperature: 0
  })
  const cached = next.usage?.prompt_tokens_details?.cached_tokens ?? 0
  assert.ok(cached > PREFIX_STATE_MIN_TOKENS && cached < (next.usage?.prompt_tokens ?? 0), JSON.stringify(next.usage))
})
