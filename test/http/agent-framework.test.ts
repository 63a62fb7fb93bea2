// A real agent framework end to end against a running node. The Vercel AI SDK (`ai` with its
// OpenAI-compatible provider, as users point it at a local server) runs a two-step tool loop: a call to the tool it
// names, the tool executed with the parsed input, its result sent back in the tool message, and a text answer.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { createOpenAICompatible } from '@ai-sdk/openai-compatible'
import { embedMany, generateText, stepCountIs, streamText, tool } from 'ai'
import { z } from 'zod'
import { startChatNode, TINY_MODEL_ID } from '../support/chat-node.ts'

test('Vercel AI SDK: generateText with a tool and toolChoice naming it, then the answer; streamText; embedMany', async (t) => {
  const { node } = await startChatNode(t, { contextSize: 4096 }, { contextLength: 4096 })
  const meshnode = createOpenAICompatible({ name: 'meshnode', baseURL: `${node.url}/v1`, apiKey: 'sk-local-dummy' })
  const calls: unknown[] = []
  const weather = tool({
    description: 'The weather in a city',
    inputSchema: z.object({ city: z.enum(['Paris', 'Tokyo', 'Lima']), metric: z.boolean() }),
    execute: async (input) => {
      calls.push(input)
      return { sky: 'clear', temperature: 21 }
    }
  })

  const result = await generateText({
    model: meshnode.chatModel(TINY_MODEL_ID),
    prompt: 'What is the weather in Paris?',
    tools: { weather },
    toolChoice: { type: 'tool', toolName: 'weather' },
    // Step 1 must call the tool; step 2 answers with its result in the conversation.
    prepareStep: ({ stepNumber }) => stepNumber === 0 ? undefined : { toolChoice: 'none' },
    stopWhen: stepCountIs(2),
    temperature: 0,
    maxOutputTokens: 64,
    maxRetries: 0
  })
  assert.equal(result.steps.length, 2)
  const [first, second] = result.steps
  assert.equal(first.finishReason, 'tool-calls')
  assert.equal(first.toolCalls.length, 1)
  assert.equal(first.toolCalls[0].toolName, 'weather')
  assert.equal(calls.length, 1, 'the SDK executed the tool once')
  const input = calls[0] as { city: string, metric: boolean }
  assert.ok(['Paris', 'Tokyo', 'Lima'].includes(input.city))
  assert.equal(typeof input.metric, 'boolean')
  assert.deepEqual(first.toolResults.map((r) => r.output), [{ sky: 'clear', temperature: 21 }])
  assert.equal(second.toolCalls.length, 0)
  assert.ok(second.text.length > 0, 'the second step answers in text')
  assert.ok(result.usage.inputTokens != null && result.usage.inputTokens > 0)

  // Streaming, as chat UIs use it: the tool call comes through the SDK's stream parser whole.
  const streamed = streamText({
    model: meshnode.chatModel(TINY_MODEL_ID),
    prompt: 'And in Tokyo?',
    tools: { weather },
    toolChoice: { type: 'tool', toolName: 'weather' },
    temperature: 0,
    maxRetries: 0
  })
  const streamedCalls = await streamed.toolCalls
  assert.equal(streamedCalls.length, 1)
  assert.equal(streamedCalls[0].toolName, 'weather')
  assert.equal(calls.length, 2)

  // RAG stacks embed through the same provider.
  const { embeddings } = await embedMany({ model: meshnode.embeddingModel(TINY_MODEL_ID), values: ['a peer', 'a node'], maxRetries: 0 })
  assert.equal(embeddings.length, 2)
  assert.equal(embeddings[0].length, node.engine.loaded()?.embeddingLength)
})
