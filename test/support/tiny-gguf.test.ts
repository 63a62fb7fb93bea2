import { test } from 'node:test'
import type { TestContext } from 'node:test'
import assert from 'node:assert/strict'
import { mkdtemp, readFile, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { createHash } from 'node:crypto'
import { getLlama, LlamaChatSession, LlamaLogLevel, readGgufFileInfo } from 'node-llama-cpp'
import { CHATML_TEMPLATE, TINY_GGUF_CONTEXT_LENGTH, writeTinyGguf } from './tiny-gguf.ts'

// Not test/support/node.ts's helper: importing it would start compiling the whole node for a file-format test
async function tempDir (t: TestContext): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'meshnode-tiny-gguf-'))
  t.after(() => rm(dir, { recursive: true, force: true }))
  return dir
}

await test('the same seed writes the same bytes, another seed other bytes', async (t) => {
  const dir = await tempDir(t)
  const a = await writeTinyGguf(join(dir, 'a.gguf'), { seed: 7 })
  const b = await writeTinyGguf(join(dir, 'b.gguf'), { seed: 7 })
  const c = await writeTinyGguf(join(dir, 'c.gguf'), { seed: 8 })
  assert.equal(a.sha256, b.sha256)
  assert.notEqual(a.sha256, c.sha256)
  assert.equal(a.sizeBytes, c.sizeBytes)
  const bytes = await readFile(a.path)
  assert.equal(bytes.length, a.sizeBytes)
  assert.equal(createHash('sha256').update(bytes).digest('hex'), a.sha256)
  assert.ok(a.sizeBytes < 1024 * 1024, `${a.sizeBytes} bytes is not tiny`)
})

await test('the metadata names a llama model with its chat template, or none when asked', async (t) => {
  const dir = await tempDir(t)
  const withTemplate = await readGgufFileInfo(
    (await writeTinyGguf(join(dir, 'chatml.gguf'), { name: 'tiny test' })).path, { logWarnings: false })
  assert.equal(withTemplate.version, 3)
  assert.equal(withTemplate.metadata.general.architecture, 'llama')
  assert.equal(withTemplate.metadata.general.name, 'tiny test')
  assert.equal(withTemplate.metadata.tokenizer.chat_template, CHATML_TEMPLATE)
  const withoutTemplate = await readGgufFileInfo(
    (await writeTinyGguf(join(dir, 'plain.gguf'), { chatTemplate: null })).path, { logWarnings: false })
  assert.equal(withoutTemplate.metadata.tokenizer.chat_template, undefined)
})

await test('node-llama-cpp loads it, picks ChatML and generates text', async (t) => {
  const dir = await tempDir(t)
  const { path } = await writeTinyGguf(join(dir, 'tiny.gguf'))
  // One Llama per process; threads 1 because the default thread count is far slower on a 2-core machine
  const llama = await getLlama({ gpu: false, build: 'never', maxThreads: 1, progressLogs: false, logLevel: LlamaLogLevel.error })
  t.after(() => llama.dispose())
  const model = await llama.loadModel({ modelPath: path })
  const context = await model.createContext({ contextSize: TINY_GGUF_CONTEXT_LENGTH, threads: 1 })
  const session = new LlamaChatSession({ contextSequence: context.getSequence() })
  assert.equal(session.chatWrapper.wrapperName, 'ChatML')
  assert.deepEqual(model.detokenize(model.tokenize('hello world')), 'hello world')

  const answer = await session.prompt('Hello there', { maxTokens: 20 })
  assert.ok(answer.trim().length > 0, 'expected some text')
  const again = await session.prompt('Who are you?', { maxTokens: 20, temperature: 0.8, seed: 3 })
  assert.ok(again.trim().length > 0, 'expected some text when sampling too')
})
