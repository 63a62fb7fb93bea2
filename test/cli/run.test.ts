// `meshnode run`, as a new user would type it: against a node pointed at the hub stand-in, the first answer in one
// command (download with progress, load, answer, exit 0), the interactive chat with its history, the default token
// limit, --json, and a model only a peer serves asked through the node.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { createServer } from 'node:net'
import { join } from 'node:path'
import OpenAI from 'openai'
import { RUN_MAX_TOKENS } from '../../src/cli/commands/run.ts'
import { runCli as meshnode } from '../support/cli.ts'
import { startFakeHub } from '../support/fake-hub.ts'
import { FAST_NETWORK, startTestRelay, waitForPeers, wanSettings } from '../support/network.ts'
import { startTestNode, tempDir, waitFor } from '../support/node.ts'
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

test('meshnode run on a model loaded beside others asks it at once, without loading it again', async (t) => {
  const dir = await tempDir(t)
  const { node, dataDir, api } = await startTestNode(t)
  const ids: string[] = []
  for (const [name, seed] of [['first', 3], ['second', 4]] as const) {
    const gguf = await writeTinyGguf(join(dir, `${name}.gguf`), { seed })
    const imported = await api.post('/v1/app/models/import', { path: gguf.path })
    assert.equal(imported.status, 200, JSON.stringify(imported.body))
    assert.equal((await api.post('/v1/app/models/load', { modelID: imported.body.modelID })).status, 200)
    ids.push(imported.body.modelID)
  }
  const app = (await api.get('/v1/app')).body
  assert.notEqual(app.model?.modelID, ids[0], 'the node\'s `model` names the other one')
  assert.deepEqual(app.models.filter((m: { status: string }) => m.status === 'loaded').map((m: { modelID: string }) => m.modelID).sort(), [...ids].sort())

  const run = await meshnode(['run', ids[0], 'Hello', '--max-tokens', '3', '--temperature', '0', '--url', node.url, '--data-dir', dataDir])
  assert.equal(run.code, 0, run.stderr)
  assert.equal(run.stderr, '', 'nothing to download or load')
  assert.notEqual(run.stdout, '')
})

test('meshnode run on a path where no file is says so, as a usage error, and asks the node nothing', async (t) => {
  const { node, dataDir, api } = await startTestNode(t)
  const cwd = await tempDir(t)
  const before = (await api.get('/v1/app/models')).body
  for (const path of ['./nope.gguf', 'nope.gguf', '../nope/model.GGUF', '/nowhere/model.gguf', '~/nowhere-meshnode/model.gguf']) {
    const result = await meshnode(['run', path, 'hi', '--url', node.url, '--data-dir', dataDir], { cwd })
    assert.equal(result.code, 2, `${path}: ${result.stderr}`)
    assert.equal(result.stderr, `meshnode: No file at ${path}\n`)
    assert.equal(result.stdout, '')
  }
  const directory = await meshnode(['run', '.', 'hi', '--url', node.url, '--data-dir', dataDir], { cwd })
  assert.equal(directory.code, 2)
  assert.equal(directory.stderr, 'meshnode: . is not a file\n')
  assert.deepEqual((await api.get('/v1/app/models')).body, before, 'nothing imported or downloaded')
})

test('meshnode run stops an answer at 1024 tokens unless --max-tokens says otherwise, and says so; --json prints one object with the answer, model, usage and where it ran', async (t) => {
  // No end token is ever sampled from the tiny model and its context holds 4096: without a limit it writes until full
  const gguf = await writeTinyGguf(join(await tempDir(t), 'endless.gguf'), { contextLength: 4096 })
  const { node, dataDir } = await startTestNode(t)
  await node.engine.load('endless', gguf.path)
  const common = ['--url', node.url, '--data-dir', dataDir]

  const json = await meshnode(['run', 'endless', 'Hello', '--json', '--temperature', '0', ...common])
  assert.equal(json.code, 0, json.stderr)
  assert.equal(json.stderr, '')
  const answer = JSON.parse(json.stdout)
  assert.deepEqual(Object.keys(answer).sort(), ['answer', 'finish_reason', 'model', 'served_by', 'usage'])
  assert.equal(answer.model, 'endless')
  assert.equal(answer.served_by, 'local')
  assert.equal(answer.finish_reason, 'length')
  assert.equal(answer.usage.completion_tokens, RUN_MAX_TOKENS)
  assert.equal(answer.usage.total_tokens, answer.usage.prompt_tokens + RUN_MAX_TOKENS)
  const openai = new OpenAI({ baseURL: `${node.url}/v1`, apiKey: 'unused', maxRetries: 0 })
  const expected = await openai.chat.completions.create({ model: 'endless', messages: [{ role: 'user', content: 'Hello' }], max_tokens: RUN_MAX_TOKENS, temperature: 0 })
  assert.equal(answer.answer, expected.choices[0].message.content)

  const human = await meshnode(['run', 'endless', 'Hello', '--temperature', '0', ...common])
  assert.equal(human.code, 0, human.stderr)
  assert.equal(human.stdout, `${answer.answer}\n`)
  assert.match(human.stderr, /\[the answer reached 1024 tokens, the default limit; --max-tokens N allows more\]/)
  const chosen = await meshnode(['run', 'endless', 'Hello', '--max-tokens', '5', '--json', ...common])
  assert.equal(JSON.parse(chosen.stdout).usage.completion_tokens, 5)

  // In a chat, --json writes one line of JSON per answer; so does the default limit apply there
  const session = await meshnode(['run', 'endless', '-i', '--json', '--temperature', '0', ...common], { input: 'Hello\nAgain\n' })
  assert.equal(session.code, 0, session.stderr)
  const lines = session.stdout.trim().split('\n').map((line) => JSON.parse(line))
  assert.equal(lines.length, 2)
  assert.deepEqual(lines.map((line) => [line.model, line.usage.completion_tokens, line.finish_reason]), [['endless', RUN_MAX_TOKENS, 'length'], ['endless', RUN_MAX_TOKENS, 'length']])
  assert.equal(lines[0].answer, answer.answer)

  const help = await meshnode(['run', '--help'])
  assert.match(help.stdout, /--max-tokens <n>\s+most tokens per answer \(default: 1024\)/)
})

test('meshnode run on a node without the model asks the peer that serves it, through the node, and downloads nothing', async (t) => {
  const relay = await startTestRelay(t)
  const gguf = await writeTinyGguf(join(await tempDir(t), 'shared.gguf'), { seed: 5 })
  const hub = await startFakeHub() // nothing on it: a download attempt would fail, not pass silently
  t.after(() => hub.close())
  // No direct listen addresses: A and B meet through the relay only
  const a = await startTestNode(t, { network: FAST_NETWORK, p2pListen: [] })
  await a.node.engine.load('shared-tiny', gguf.path)
  const b = await startTestNode(t, { network: FAST_NETWORK, p2pListen: [], hfEndpoint: hub.url })
  for (const node of [a, b]) assert.equal((await node.api.patch('/v1/app/settings', wanSettings(relay))).status, 200)
  await waitForPeers(b, [a.nodeID], { timeoutMs: 120_000 })
  await waitFor(async () => (await b.api.get('/v1/models')).body.data.some((m: { id: string }) => m.id === 'shared-tiny'), { timeoutMs: 60_000, what: 'B to list A\'s model' })

  const run = await meshnode(['run', 'shared-tiny', 'Hello', '--max-tokens', '5', '--temperature', '0', '--json', '--url', b.node.url, '--data-dir', b.dataDir])
  assert.equal(run.code, 0, run.stderr)
  const answer = JSON.parse(run.stdout)
  assert.equal(answer.served_by, `peer:${a.nodeID}`)
  assert.equal(answer.usage.completion_tokens, 5)
  const openai = new OpenAI({ baseURL: `${a.node.url}/v1`, apiKey: 'unused', maxRetries: 0 })
  const local = await openai.chat.completions.create({ model: 'shared-tiny', messages: [{ role: 'user', content: 'Hello' }], max_tokens: 5, temperature: 0 })
  assert.equal(answer.answer, local.choices[0].message.content, 'the peer\'s answer, as A gives it')

  const human = await meshnode(['run', 'shared-tiny', 'Hello', '--max-tokens', '5', '--temperature', '0', '--url', b.node.url, '--data-dir', b.dataDir])
  assert.equal(human.code, 0, human.stderr)
  assert.equal(human.stdout, `${answer.answer}\n`)
  assert.match(human.stderr, new RegExp(`shared-tiny is served by peer:${a.nodeID}; asking it through this node`))
  assert.equal(b.node.engine.loaded(), null, 'B loaded nothing')
  assert.deepEqual((await b.api.get('/v1/app/models')).body.models.filter((m: { status: string }) => m.status !== 'available'), [], 'B downloaded and imported nothing')
  assert.deepEqual(hub.requests, [], 'nobody asked the hub')
})
