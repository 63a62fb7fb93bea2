// A chat asked of an engine directly, as the engine tests that look at prompt caching do: its text and its usage.
import assert from 'node:assert/strict'
import type { ChatMessage, ChatUsage, LocalEngine } from '../../src/inference/index.ts'

export async function ask (engine: LocalEngine, messages: ChatMessage[], requester: string | undefined, maxTokens = 8): Promise<{ text: string, usage: ChatUsage }> {
  let text = ''
  let usage: ChatUsage | undefined
  for await (const event of engine.generate({ messages, temperature: 0, maxTokens }, { requester })) {
    if (event.type === 'delta') text += event.text
    else if (event.type === 'done') usage = event.usage
  }
  assert.ok(usage != null)
  return { text, usage }
}
