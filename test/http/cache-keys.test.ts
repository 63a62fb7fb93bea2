// Cache keys (OpenAI's prompt_cache_key on chat completions and Responses, Anthropic's metadata.user_id on Messages)
// divide one requester's prompt cache into sessions. With one slot, a session's long prompt is saved to disk when
// another session of the same requester takes the slot, and restored at its next turn; without keys, the other
// conversation cuts the slot down to their common start and nothing is saved. A key never reaches another requester's
// cache, and is neither written to disk nor logged.
import { test, type TestContext } from 'node:test'
import assert from 'node:assert/strict'
import { readFile } from 'node:fs/promises'
import { join } from 'node:path'
import { Writable } from 'node:stream'
import OpenAI from 'openai'
import type { ChatCompletionMessageParam } from 'openai/resources/chat/completions'
import { PREFIX_STATE_MIN_TOKENS } from '../../src/inference/index.ts'
import { startTestNode, tempDir, type TestNode } from '../support/node.ts'
import { startChatNode, TINY_MODEL_ID } from '../support/chat-node.ts'
import { writeTinyGguf } from '../support/tiny-gguf.ts'

/** Words of the tiny vocabulary, one token each, repeated to `count` tokens. */
const words = (list: string[], count: number): string => Array.from({ length: count }, (_, i) => list[i % list.length]).join(' ')
/** Over half the minimum a saved prefix must hold: each session's whole prompt is over it, what they share is under it. */
const PART = Math.ceil(PREFIX_STATE_MIN_TOKENS * 0.6)
const system: ChatCompletionMessageParam = { role: 'system', content: words(['question', 'network', 'answer', 'people'], PART) }
const sessionA: ChatCompletionMessageParam[] = [system, { role: 'user', content: words(['water', 'find', 'long', 'day'], PART) }]
const sessionB: ChatCompletionMessageParam[] = [system, { role: 'user', content: words(['model', 'node', 'peer', 'credit'], PART) }]
const nextTurn = (turn: ChatCompletionMessageParam[]): ChatCompletionMessageParam[] => [...turn, { role: 'assistant', content: 'I see.' }, { role: 'user', content: 'and then what?' }]

/** Distinct enough to be found in any log line or file that held it. */
const KEY_A = 'user-4711-session-alpha'
const KEY_B = 'user-4711-session-beta'

interface LoggedNode extends TestNode { openai: OpenAI, logs: string[] }

/** A node with one slot and the tiny model loaded, whose log lines (debug and up) are kept. */
async function startLoggedNode (t: TestContext): Promise<LoggedNode> {
  const dir = await tempDir(t, 'meshnode-model-')
  const { path } = await writeTinyGguf(join(dir, 'tiny.gguf'), { seed: 7, contextLength: 4096 })
  const logs: string[] = []
  const destination = new Writable({ write (chunk: Buffer, _encoding, done) { logs.push(chunk.toString()); done() } })
  const started = await startTestNode(t, { slots: 1, logLevel: 'debug' }, { logDestination: destination })
  await started.node.engine.load(TINY_MODEL_ID, path)
  const openai = new OpenAI({ baseURL: `${started.node.url}/v1`, apiKey: 'sk-local-dummy', maxRetries: 0, timeout: 300_000 })
  return { ...started, openai, logs }
}

async function chat (openai: OpenAI, messages: ChatCompletionMessageParam[], cacheKey?: string): Promise<{ prompt: number, cached: number }> {
  // One token answered: the slot then holds exactly the prompt (a sampled token is evaluated only when another follows)
  const answer = await openai.chat.completions.create({
    model: TINY_MODEL_ID, messages, max_tokens: 1, temperature: 0, ...(cacheKey == null ? {} : { prompt_cache_key: cacheKey })
  })
  const usage = answer.usage
  assert.ok(usage?.prompt_tokens_details != null, JSON.stringify(usage))
  return { prompt: usage.prompt_tokens, cached: usage.prompt_tokens_details.cached_tokens ?? -1 }
}

test('chat: two sessions of one requester with their own prompt_cache_key keep their long prefixes; without keys they cut each other\'s', async (t) => {
  const { openai, logs, dataDir, api, node } = await startLoggedNode(t)

  // With keys: B's session does not reuse A's slot (not even the system prompt they share); taking it saves A's
  // prompt first, and A's next turn gets it back whole.
  const a1 = await chat(openai, sessionA, KEY_A)
  assert.ok(a1.prompt > PREFIX_STATE_MIN_TOKENS, JSON.stringify(a1))
  assert.equal(a1.cached, 0)
  const b1 = await chat(openai, sessionB, KEY_B)
  assert.equal(b1.cached, 0, 'another session\'s slot is cleared for it, as another requester\'s')
  const a2 = await chat(openai, nextTurn(sessionA), KEY_A)
  assert.equal(a2.cached, a1.prompt, 'A\'s next turn reuses all of its previous prompt')
  const b2 = await chat(openai, nextTurn(sessionB), KEY_B)
  assert.equal(b2.cached, b1.prompt, 'and B\'s, saved in turn when A took the slot back')

  // Without keys: one requester, one slot. B's conversation continues from A's slot, cutting it to their common start;
  // nothing is saved between requests of one requester, so A's next turn gets only that start back.
  const a1Plain = await chat(openai, sessionA)
  assert.equal(a1Plain.cached, 0, 'the requester\'s cache is not its sessions\'')
  const b1Plain = await chat(openai, sessionB)
  assert.ok(b1Plain.cached > 0 && b1Plain.cached < a1Plain.prompt, `B reused ${b1Plain.cached} of A's ${a1Plain.prompt}: their common start`)
  const a2Plain = await chat(openai, nextTurn(sessionA))
  assert.ok(a2Plain.cached <= b1Plain.cached, `A's next turn reused ${a2Plain.cached}; the common start is ${b1Plain.cached} tokens`)
  assert.ok(a2Plain.cached < a1Plain.prompt)

  // A cache key divides its requester's cache, nobody else's: another API key naming A's key reuses nothing of it.
  const key = (await api.post('/v1/app/apikeys', { name: 'alice' })).body.key as string
  assert.equal((await api.patch('/v1/app/settings', { allow_network_access: true })).status, 200)
  const alice = new OpenAI({ baseURL: `${node.url}/v1`, apiKey: key, maxRetries: 0, timeout: 300_000 })
  assert.equal((await chat(alice, nextTurn(sessionA), KEY_A)).cached, 0, 'the same cache key under another API key is another session')

  // The sessions' states are on disk under their hashed requester; the keys themselves nowhere
  await node.engine.unload() // saves what the slot holds and waits for every state to be indexed
  const index = await readFile(join(dataDir, 'prefix-states', 'index.json'), 'utf8')
  const requesters = new Set((JSON.parse(index) as { states: Array<{ requester: string }> }).states.map((state) => state.requester))
  assert.ok([...requesters].filter((requester) => /^local#[\w-]+$/.test(requester)).length >= 2, JSON.stringify([...requesters]))
  for (const text of [index, logs.join('')]) {
    assert.ok(!text.includes(KEY_A) && !text.includes(KEY_B), 'a cache key is never written nor logged')
  }
  assert.ok(logs.length > 0, 'the node logged at debug')
})

test('Responses: prompt_cache_key picks the session\'s slot', async (t) => {
  const { api } = await startChatNode(t, { slots: 1 })
  const ask = async (cacheKey: string): Promise<number> => {
    const res = await api.post('/v1/responses', { model: TINY_MODEL_ID, input: 'hello there, how are you?', max_output_tokens: 1, temperature: 0, prompt_cache_key: cacheKey })
    assert.equal(res.status, 200, JSON.stringify(res.body))
    return res.body.usage.input_tokens_details.cached_tokens as number
  }
  assert.equal(await ask(KEY_A), 0)
  assert.ok(await ask(KEY_A) > 0, 'the same key reuses its slot')
  assert.equal(await ask(KEY_B), 0, 'another key does not')
})

test('Messages: metadata.user_id picks the user\'s slot', async (t) => {
  const { api } = await startChatNode(t, { slots: 1 })
  const ask = async (userID: string): Promise<number> => {
    const res = await api.post('/v1/messages', { model: TINY_MODEL_ID, max_tokens: 1, temperature: 0, messages: [{ role: 'user', content: 'hello there, how are you?' }], metadata: { user_id: userID } })
    assert.equal(res.status, 200, JSON.stringify(res.body))
    return res.body.usage.cache_read_input_tokens as number
  }
  assert.equal(await ask(KEY_A), 0)
  assert.ok(await ask(KEY_A) > 0, 'the same user reuses its slot')
  assert.equal(await ask(KEY_B), 0, 'another user does not')
})

test('a cache key of another type or over 256 characters is refused with 400 in the dialect\'s envelope', async (t) => {
  const { api } = await startChatNode(t, { slots: 1 })
  const long = 'k'.repeat(257)
  const hello = 'hello'
  const openaiRefusals: Array<[string, Record<string, unknown>]> = [
    ['/v1/chat/completions', { model: TINY_MODEL_ID, messages: [{ role: 'user', content: hello }], prompt_cache_key: 42 }],
    ['/v1/chat/completions', { model: TINY_MODEL_ID, messages: [{ role: 'user', content: hello }], prompt_cache_key: long }],
    ['/v1/responses', { model: TINY_MODEL_ID, input: hello, prompt_cache_key: 42 }],
    ['/v1/responses', { model: TINY_MODEL_ID, input: hello, prompt_cache_key: long }]
  ]
  for (const [path, body] of openaiRefusals) {
    const res = await api.post(path, body)
    assert.equal(res.status, 400, JSON.stringify(res.body))
    assert.equal(res.body.error.type, 'invalid_request_error', JSON.stringify(res.body))
    assert.equal(res.body.error.param, 'prompt_cache_key', JSON.stringify(res.body))
  }
  for (const metadata of [{ user_id: 42 }, { user_id: long }, 'someone']) {
    const res = await api.post('/v1/messages', { model: TINY_MODEL_ID, max_tokens: 1, messages: [{ role: 'user', content: hello }], metadata })
    assert.equal(res.status, 400, JSON.stringify(res.body))
    assert.deepEqual(Object.keys(res.body), ['type', 'error', 'request_id'])
    assert.equal(res.body.error.type, 'invalid_request_error')
    assert.match(res.body.error.message, /metadata/)
  }
  // The longest key allowed is taken
  const taken = await api.post('/v1/chat/completions', { model: TINY_MODEL_ID, messages: [{ role: 'user', content: hello }], max_tokens: 1, prompt_cache_key: long.slice(1) })
  assert.equal(taken.status, 200, JSON.stringify(taken.body))
})
