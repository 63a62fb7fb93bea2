// `meshnode run`, as a new user would type it: against a node pointed at the hub stand-in, the first answer in one
// command (download with progress, load, answer, exit 0), and the interactive chat with its history.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { createServer } from 'node:net'
import { join } from 'node:path'
import OpenAI from 'openai'
import { runCli as meshnode } from '../support/cli.ts'
import { startFakeHub } from '../support/fake-hub.ts'
import { startTestNode, tempDir } from '../support/node.ts'
import { writeTinyGguf } from '../support/tiny-gguf.ts'

const CATALOG_ID = 'smollm2-135m-instruct-q8_0'

test('meshnode run <catalog id> "prompt" downloads, loads, prints the answer and exits 0; again, it only answers', async (t) => {
  const hub = await startFakeHub()
  t.after(() => hub.close())
  const gguf = await writeTinyGguf(join(await tempDir(t), 'tiny.gguf'))
  await hub.addFile('HuggingFaceTB/SmolLM2-135M-Instruct-GGUF', 'smollm2-135m-instruct-q8_0.gguf', gguf.path)
  const { node, dataDir, api } = await startTestNode(t, { hfEndpoint: hub.url })
  // Network access on: the CLI finds the admin-token through --data-dir; the URL is given the way SDKs write it
  assert.equal((await api.patch('/v1/app/settings', { allow_network_access: true })).status, 200)
  const common = ['--url', `${node.url}/v1/`, '--data-dir', dataDir]

  const first = await meshnode(['run', CATALOG_ID, 'Hello', 'there', '--max-tokens', '6', '--temperature', '0', ...common])
  assert.equal(first.code, 0, first.stderr)
  assert.match(first.stderr, new RegExp(`Downloading ${CATALOG_ID}`))
  assert.match(first.stderr, new RegExp(`Loading ${CATALOG_ID}\\.\\.\\.`))
  assert.equal(node.engine.loaded()?.modelID, CATALOG_ID)
  const openai = new OpenAI({ baseURL: `${node.url}/v1`, apiKey: node.adminToken, maxRetries: 0 })
  const expected = await openai.chat.completions.create({ model: CATALOG_ID, messages: [{ role: 'user', content: 'Hello there' }], max_tokens: 6, temperature: 0 })
  assert.equal(first.stdout, `${expected.choices[0].message.content ?? ''}\n`)

  const fetchedBefore = hub.requests.length
  const again = await meshnode(['run', CATALOG_ID, 'Hello there', '--max-tokens', '6', '--temperature', '0', ...common])
  assert.equal(again.code, 0, again.stderr)
  assert.equal(again.stdout, first.stdout)
  assert.equal(again.stderr, '', 'nothing to download or load')
  assert.equal(hub.requests.length, fetchedBefore)
})

test('meshnode run with no prompt chats: streamed answers, the conversation kept, /bye to leave', async (t) => {
  const gguf = await writeTinyGguf(join(await tempDir(t), 'Chatty.gguf'), { seed: 12 })
  const { node, dataDir } = await startTestNode(t)
  const common = ['--url', node.url, '--data-dir', dataDir]

  // -i: the chat a terminal gets, on a pipe; the model is a file on this machine, imported where it lies
  const session = await meshnode(['run', gguf.path, '-i', '--max-tokens', '4', '--temperature', '0', ...common], { input: 'Hello\n\nAgain\n/bye\nnever asked\n' })
  assert.equal(session.code, 0, session.stderr)
  assert.match(session.stderr, /Imported .*Chatty\.gguf as chatty/)
  const openai = new OpenAI({ baseURL: `${node.url}/v1`, apiKey: 'unused', maxRetries: 0 })
  const ask = async (messages: Array<{ role: 'user' | 'assistant', content: string }>): Promise<string> =>
    (await openai.chat.completions.create({ model: 'chatty', messages, max_tokens: 4, temperature: 0 })).choices[0].message.content ?? ''
  const a1 = await ask([{ role: 'user', content: 'Hello' }])
  const a2 = await ask([{ role: 'user', content: 'Hello' }, { role: 'assistant', content: a1 }, { role: 'user', content: 'Again' }])
  assert.equal(session.stdout, `${a1}\n\n${a2}\n\n`, 'the second answer saw the first turn; nothing after /bye was asked')
})

test('meshnode run says how to start a node when none answers; bad numbers are usage errors naming the option', async (t) => {
  const blocker = createServer()
  await new Promise<void>((resolve) => blocker.listen(0, '127.0.0.1', resolve))
  const port = (blocker.address() as { port: number }).port
  await new Promise((resolve) => blocker.close(resolve))
  const dataDir = await tempDir(t)

  const none = await meshnode(['run', CATALOG_ID, 'Hello', '--port', String(port), '--data-dir', dataDir])
  assert.equal(none.code, 1)
  assert.match(none.stderr, new RegExp(`Cannot reach the node at http://127\\.0\\.0\\.1:${port} .*Start it with: meshnode serve`))
  assert.equal(none.stdout, '')

  for (const [args, message] of [
    [['run', CATALOG_ID, 'Hello', '--max-tokens', 'abc'], '--max-tokens must be a whole number from 1 to 1000000, not abc'],
    [['chat', 'Hello', '--max-tokens', 'abc'], '--max-tokens must be a whole number from 1 to 1000000, not abc'],
    [['chat', 'Hello', '--temperature', '3'], '--temperature must be a number from 0 to 2, not 3'],
    [['status', '--port', 'http'], '--port must be a whole number from 0 to 65535, not http'],
    [['wallet', 'transactions', '--limit', '0'], '--limit must be a whole number from 1 to 500, not 0']
  ] as const) {
    const result = await meshnode([...args, '--data-dir', dataDir, ...((args as readonly string[]).includes('--port') ? [] : ['--port', String(port)])])
    assert.equal(result.code, 2, `${args.join(' ')}: ${result.stderr}`)
    assert.ok(result.stderr.includes(`meshnode: ${message}`), result.stderr)
  }
  const unknown = await meshnode(['run'])
  assert.equal(unknown.code, 2, 'a missing argument is a usage error too')
  assert.match(unknown.stderr, /missing required argument 'model'/)
})
