// The JSON Schemas frameworks actually send, from their zod schemas: zod 4 writes the safe-integer range on every
// integer, and a bounded integer or number has both bounds. LangChain's withStructuredOutput and the AI SDK's generateObject
// (through its OpenAI-compatible provider, and through @ai-sdk/openai's default, the Responses API) get objects
// that hold to the schema, bounds included.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { createOpenAI } from '@ai-sdk/openai'
import { createOpenAICompatible } from '@ai-sdk/openai-compatible'
import { ChatOpenAI } from '@langchain/openai'
import { generateObject, generateText } from 'ai'
import { z } from 'zod'
import { startChatNode, TINY_MODEL_ID } from '../support/chat-node.ts'

const Review = z.object({
  title: z.enum(['good', 'bad']),
  count: z.number().int(),
  stars: z.number().int().min(1).max(5),
  confidence: z.number().min(0).max(1),
  recommended: z.boolean()
})

function assertReview (value: unknown): void {
  const review = Review.parse(value) // throws on anything the schema refuses, bounds included
  assert.ok(review.stars >= 1 && review.stars <= 5)
  assert.ok(review.confidence >= 0 && review.confidence <= 1)
}

test('AI SDK generateObject (chat completions and the Responses API) and LangChain withStructuredOutput hold to zod schemas with integers and bounds', async (t) => {
  const { node } = await startChatNode(t, { contextSize: 4096 }, { contextLength: 4096 })
  const compatible = createOpenAICompatible({ name: 'meshnode', baseURL: `${node.url}/v1`, apiKey: 'unused', supportsStructuredOutputs: true })
  for (let i = 0; i < 3; i++) {
    const { object } = await generateObject({ model: compatible.chatModel(TINY_MODEL_ID), schema: Review, prompt: 'Review this node.', maxRetries: 0, maxOutputTokens: 200 })
    assertReview(object)
  }

  // @ai-sdk/openai with no settings changed but where it points: its default model speaks the Responses API
  const openai = createOpenAI({ baseURL: `${node.url}/v1`, apiKey: 'unused' })
  const text = await generateText({ model: openai(TINY_MODEL_ID), prompt: 'Hello', maxOutputTokens: 4, maxRetries: 0 })
  assert.equal(text.usage.outputTokens, 4)
  const { object } = await generateObject({ model: openai(TINY_MODEL_ID), schema: Review, prompt: 'Review this node.', maxRetries: 0, maxOutputTokens: 200 })
  assertReview(object)

  const langchain = new ChatOpenAI({ model: TINY_MODEL_ID, apiKey: 'unused', configuration: { baseURL: `${node.url}/v1` }, maxRetries: 0, maxTokens: 200 })
  const structured = langchain.withStructuredOutput(Review)
  assertReview(await structured.invoke('Review this node.'))
})
