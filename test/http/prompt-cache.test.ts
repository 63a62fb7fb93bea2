import { test } from 'node:test'
import assert from 'node:assert/strict'
import OpenAI from 'openai'
import type { ChatCompletionMessageParam } from 'openai/resources/chat/completions'
import { startChatNode, TINY_MODEL_ID } from '../support/chat-node.ts'

// The prompt cache's acceptance test, through the API as clients see it: the next turn of a conversation reports the tokens it
// reused in usage.prompt_tokens_details.cached_tokens, and a request made with another API key never reuses them.

test('a multi-turn conversation reuses its prefix within one API key and never across keys', async (t) => {
  const { node, api, openai: local } = await startChatNode(t, { slots: 1 })
  const system: ChatCompletionMessageParam = { role: 'system', content: 'You are a helpful model.' }
  const turn1Messages: ChatCompletionMessageParam[] = [system, { role: 'user', content: 'hello there, how are you?' }]

  // Network access off: every loopback client is the machine's owner, one requester.
  const owner1 = await local.chat.completions.create({ model: TINY_MODEL_ID, messages: turn1Messages, max_tokens: 6, temperature: 0 })
  assert.deepEqual(owner1.usage?.prompt_tokens_details, { cached_tokens: 0 })
  const owner2 = await local.chat.completions.create({ model: TINY_MODEL_ID, messages: turn1Messages, max_tokens: 6, temperature: 0 })
  assert.equal(owner2.usage?.prompt_tokens_details?.cached_tokens, (owner2.usage?.prompt_tokens ?? 0) - 1)

  const keys: string[] = []
  for (const name of ['alice', 'bob']) keys.push((await api.post('/v1/app/apikeys', { name })).body.key as string)
  assert.equal((await api.patch('/v1/app/settings', { allow_network_access: true })).status, 200)
  const [alice, bob] = keys.map((key) => new OpenAI({ baseURL: `${node.url}/v1`, apiKey: key, maxRetries: 0, timeout: 60_000 }))

  // One token answered: the slot then holds exactly turn 1's prompt (a sampled token is evaluated only when another
  // follows it), so the prefix turn 2 shares with it is known: all of turn 1's prompt, not a token more.
  const turn1 = await alice.chat.completions.create({ model: TINY_MODEL_ID, messages: turn1Messages, max_tokens: 1, temperature: 0 })
  assert.equal(turn1.usage?.prompt_tokens_details?.cached_tokens, 0, 'the owner\'s cache is not alice\'s')
  const turn2Messages: ChatCompletionMessageParam[] = [...turn1Messages,
    { role: 'assistant', content: 'I am well, thank you.' }, { role: 'user', content: 'and then what?' }]

  // Streamed, the usage chunk carries the same details: turn 2 reuses turn 1's prompt and evaluates only what it adds.
  const stream = await alice.chat.completions.create({
    model: TINY_MODEL_ID, messages: turn2Messages, max_tokens: 6, temperature: 0, stream: true, stream_options: { include_usage: true }
  })
  let usage: OpenAI.CompletionUsage | undefined
  for await (const chunk of stream) usage = chunk.usage ?? usage
  const p1 = turn1.usage?.prompt_tokens ?? 0
  assert.ok(p1 > 0 && (usage?.prompt_tokens ?? 0) > p1)
  assert.equal(usage?.prompt_tokens_details?.cached_tokens, p1, 'turn 2 reused exactly turn 1\'s prompt')

  // Turn 3 continues turn 2, whose answer the slot holds too (up to how that answer's text re-tokenizes).
  const turn3 = await alice.chat.completions.create({
    model: TINY_MODEL_ID, messages: [...turn2Messages, { role: 'assistant', content: 'Then the sun rose.' }, { role: 'user', content: 'why?' }], max_tokens: 2, temperature: 0
  })
  const p2 = usage?.prompt_tokens ?? 0
  const cached3 = turn3.usage?.prompt_tokens_details?.cached_tokens ?? -1
  assert.ok(cached3 >= p2 && cached3 < (turn3.usage?.prompt_tokens ?? 0), `turn 3 reused ${cached3}; turn 2's prompt is ${p2} tokens`)

  // Bob sends alice's very conversation: nothing of hers is reused (her slot is cleared for him), and then nothing of
  // his for her.
  const bobs = await bob.chat.completions.create({ model: TINY_MODEL_ID, messages: turn2Messages, max_tokens: 6, temperature: 0 })
  assert.equal(bobs.usage?.prompt_tokens_details?.cached_tokens, 0)
  const hers = await alice.chat.completions.create({ model: TINY_MODEL_ID, messages: turn2Messages, max_tokens: 6, temperature: 0 })
  assert.equal(hers.usage?.prompt_tokens_details?.cached_tokens, 0)
  assert.equal(hers.choices[0].message.content, bobs.choices[0].message.content, 'the same answer whoever evaluated the prompt')
})
