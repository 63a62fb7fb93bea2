// A started node with the generated tiny GGUF loaded in its real engine, and an official OpenAI client pointed at it.
import type { TestContext } from 'node:test'
import { join } from 'node:path'
import OpenAI from 'openai'
import { readSse } from '../../src/cli/sse.ts'
import type { NodeConfig } from '../../src/config.ts'
import { startTestNode, tempDir, type TestNode } from './node.ts'
import { writeTinyGguf } from './tiny-gguf.ts'

export const TINY_MODEL_ID = 'tiny-chat'

export interface ChatTestNode extends TestNode {
  openai: OpenAI
  modelPath: string
}

export async function startChatNode (t: TestContext, overrides: Partial<NodeConfig> = {}, model: { contextLength?: number } = {}): Promise<ChatTestNode> {
  const dir = await tempDir(t, 'meshnode-model-')
  const { path } = await writeTinyGguf(join(dir, 'tiny.gguf'), { seed: 7, contextLength: model.contextLength })
  const started = await startTestNode(t, overrides)
  await started.node.engine.load(TINY_MODEL_ID, path)
  // The SDK sends a dummy key, as many do; the node ignores it while network access is off.
  const openai = new OpenAI({ baseURL: `${started.node.url}/v1`, apiKey: 'sk-local-dummy', maxRetries: 0, timeout: 300_000 }) // generous: a busy machine is slow, and a deadline is no assertion
  return { ...started, openai, modelPath: path }
}

/** Reads a whole SSE body into its data payloads and comment lines, as a client on the wire sees them. */
export async function collectSse (response: Response): Promise<{ data: string[], comments: string[] }> {
  const data: string[] = []
  const comments: string[] = []
  for await (const event of readSse(response, { onComment: (text) => { comments.push(text) } })) data.push(event.data)
  return { data, comments }
}
