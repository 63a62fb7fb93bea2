import { test } from 'node:test'
import assert from 'node:assert/strict'
import { join } from 'node:path'
import OpenAI from 'openai'
import type { ChatCompletionMessageParam } from 'openai/resources/chat/completions'
import { tempDir, waitFor, type TestNode } from '../support/node.ts'
import { startTestRelay, startWanNode, waitForPeers } from '../support/network.ts'
import { writeTinyGguf } from '../support/tiny-gguf.ts'

const MODEL = 'tiny-chat'
const messages: ChatCompletionMessageParam[] = [
  { role: 'system', content: 'You are a helpful model.' }, { role: 'user', content: 'hello there, how are you?' }
]

function openaiFor (node: TestNode): OpenAI {
  return new OpenAI({ baseURL: `${node.node.url}/v1`, apiKey: 'sk-local-dummy', maxRetries: 0, timeout: 60_000 })
}

async function cachedTokens (node: TestNode): Promise<{ cached: number | undefined, prompt: number, servedBy: string | null }> {
  // On a loaded machine a peer can miss heartbeats and drop out of the table for a moment: this test is about the
  // cache, so it waits for the served model to be listed before each request.
  await waitFor(async () => (await openaiFor(node).models.list()).data.length > 0, { what: `${node.nodeID.slice(0, 8)} to list the model` })
  const { data, response } = await openaiFor(node).chat.completions.create({ model: MODEL, messages, max_tokens: 4, temperature: 0 }).withResponse()
  return { cached: data.usage?.prompt_tokens_details?.cached_tokens, prompt: data.usage?.prompt_tokens ?? 0, servedBy: response.headers.get('x-served-by') }
}

test('a peer\'s requests reuse their own prompt cache at the serving node, reported over the wire, and nobody else\'s', async (t) => {
  const relay = await startTestRelay(t)
  const { path } = await writeTinyGguf(join(await tempDir(t, 'meshnode-model-'), 'tiny.gguf'), { seed: 7 })
  const server = await startWanNode(t, relay, { slots: 1 })
  await server.node.engine.load(MODEL, path)
  const [asker, other] = [await startWanNode(t, relay), await startWanNode(t, relay)]
  await Promise.all([waitForPeers(asker, [server.nodeID]), waitForPeers(other, [server.nodeID])])

  const first = await cachedTokens(asker)
  assert.equal(first.servedBy, `peer:${server.nodeID}`)
  assert.equal(first.cached, 0)
  const again = await cachedTokens(asker)
  assert.equal(again.cached, again.prompt - 1, 'the same peer\'s same prompt: all but the last token reused, and the requester is told')

  // Another peer, and the serving node's own owner, with the very same prompt: nothing of the asker's is reused.
  assert.equal((await cachedTokens(other)).cached, 0)
  assert.equal((await cachedTokens(server)).cached, 0)
  assert.equal((await cachedTokens(asker)).cached, 0, 'the asker\'s slot was cleared for the others')
})
