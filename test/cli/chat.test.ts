import { test } from 'node:test'
import assert from 'node:assert/strict'
import { execFile } from 'node:child_process'
import { promisify } from 'node:util'
import { startChatNode, TINY_MODEL_ID } from '../support/chat-node.ts'
import { CLI } from '../support/node.ts'

const run = promisify(execFile)

test('meshnode chat streams the answer of the loaded model and reports where it ran', async (t) => {
  const { node, dataDir, openai } = await startChatNode(t)
  const { stdout, stderr } = await run(process.execPath, [CLI, 'chat', 'Tell', 'me', 'a', 'story', '--max-tokens', '8', '--temperature', '0', '--url', node.url, '--data-dir', dataDir])
  const expected = await openai.chat.completions.create({ model: TINY_MODEL_ID, messages: [{ role: 'user', content: 'Tell me a story' }], max_tokens: 8, temperature: 0 })
  assert.equal(stdout.trim(), (expected.choices[0].message.content ?? '').trim())
  assert.match(stderr, new RegExp(`${TINY_MODEL_ID} on local: \\d+ prompt \\+ 8 completion tokens`))

  const json = await run(process.execPath, [CLI, 'chat', 'hi', '--max-tokens', '2', '--json', '--url', node.url, '--data-dir', dataDir])
  const chunks = json.stdout.trim().split('\n').map((line) => JSON.parse(line) as { object: string })
  assert.ok(chunks.length >= 3 && chunks.every((c) => c.object === 'chat.completion.chunk'))
})

test('meshnode chat with no model anywhere says how to load one', async (t) => {
  const { node, dataDir } = await startChatNode(t)
  await node.engine.unload()
  await assert.rejects(run(process.execPath, [CLI, 'chat', 'hi', '--url', node.url, '--data-dir', dataDir]), (err: { code: number, stderr: string }) => {
    assert.equal(err.code, 1)
    assert.match(err.stderr, /meshnode models load/)
    return true
  })
})
