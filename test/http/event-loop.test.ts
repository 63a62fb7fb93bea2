// No request holds the node's event loop while it is prepared: a text too large for the context is refused before it
// is tokenized (a bound in bytes), and a large one that may fit is tokenized on another thread. llama.cpp tokenizes
// text outside the vocabulary (emoji: four byte tokens each) in far more than linear time, so before this a megabyte
// of emoji stopped /health, every stream and the peer network for half a minute.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { join } from 'node:path'
import { monitorEventLoopDelay } from 'node:perf_hooks'
import { getSharedLlama } from '../../src/inference/index.ts'
import { startChatNode, TINY_MODEL_ID } from '../support/chat-node.ts'
import { tempDir, type Api } from '../support/node.ts'
import { FAST_NETWORK, startTestRelay, waitForPeers, wanSettings } from '../support/network.ts'
import { startTestNode } from '../support/node.ts'
import { writeTinyGguf } from '../support/tiny-gguf.ts'

/** A body just under the node's 1 MiB limit: 260,000 emoji (1,040,000 bytes of text). */
const EMOJI = '\u{1F600}'.repeat(260_000)
/** The longest delay of the event loop a test accepts while the hostile request is prepared (it was 37 s). */
const MAX_LOOP_DELAY_MS = 1_000

/** Runs `during` while measuring the process's event loop (the node runs in it), polling /health all along. */
async function measured<T> (api: Api, during: () => Promise<T>): Promise<{ result: T, maxDelayMs: number, healthAnswers: number }> {
  const histogram = monitorEventLoopDelay({ resolution: 10 })
  histogram.enable()
  let healthAnswers = 0
  let done = false
  const health = (async () => {
    while (!done) {
      const res = await api.get('/health')
      assert.equal(res.status, 200)
      healthAnswers++
    }
  })()
  try {
    const result = await during()
    return { result, maxDelayMs: histogram.max / 1e6, healthAnswers }
  } finally {
    done = true
    await health
    histogram.disable()
  }
}

test('260k emoji in chat, completions, embeddings and tokenize are refused with a 400 naming the limit, the loop never held', async (t) => {
  const { api } = await startChatNode(t)
  // A stream runs all along, and finishes
  const stream = fetch(`${api.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: TINY_MODEL_ID, messages: [{ role: 'user', content: 'hello' }], max_tokens: 200, stream: true, temperature: 0 })
  })
  const requests: Array<[string, Record<string, unknown>, string]> = [
    ['/v1/chat/completions', { model: TINY_MODEL_ID, messages: [{ role: 'user', content: EMOJI }], max_tokens: 2 }, 'messages'],
    ['/v1/chat/completions', { model: TINY_MODEL_ID, messages: [{ role: 'user', content: EMOJI }], max_tokens: 2, stream: true }, 'messages'],
    ['/v1/completions', { model: TINY_MODEL_ID, prompt: EMOJI, max_tokens: 2 }, 'prompt'],
    ['/v1/embeddings', { model: TINY_MODEL_ID, input: EMOJI }, 'input.0'],
    ['/v1/tokenize', { model: TINY_MODEL_ID, content: EMOJI }, 'content']
  ]
  const { result, maxDelayMs, healthAnswers } = await measured(api, async () => await Promise.all(requests.map(async ([path, body]) => await api.post(path, body))))
  for (const [i, res] of result.entries()) {
    const [path, , param] = requests[i]
    assert.equal(res.status, 400, `${path}: ${JSON.stringify(res.body)}`)
    assert.equal(res.body.error.param, param, JSON.stringify(res.body))
    assert.equal(res.body.error.code, 'context_length_exceeded', 'a context overflow as any other: clients compact on it')
    assert.match(res.body.error.message, /10400\d\d bytes of text; model tiny-chat reads at most \d+ per request \(\d+ tokens of at most \d+ bytes each\)/)
  }
  assert.ok(maxDelayMs < MAX_LOOP_DELAY_MS, `the event loop was held for ${maxDelayMs} ms`)
  assert.ok(healthAnswers > 0)
  // In Anthropic's words, which Claude Code compacts on (the tokens counted as the fewest the bytes can be)
  const messages = await api.post('/v1/messages', { model: TINY_MODEL_ID, max_tokens: 2, messages: [{ role: 'user', content: EMOJI }] })
  assert.equal(messages.status, 400)
  assert.match(messages.body.error.message, /^prompt is too long: \d+ tokens > \d+ maximum$/)
  const streamed = await stream
  assert.equal(streamed.status, 200)
  assert.match(await streamed.text(), /data: \[DONE\]/)
})

test('a large text that passes the bound is tokenized off the event loop: the same tokens, or a 400 naming its token count', async (t) => {
  // A context long enough that 40,000 emoji (160,000 bytes) pass the byte bound and must be tokenized to be judged
  const contextLength = 32_768
  const { api, modelPath } = await startChatNode(t, { contextSize: contextLength, slots: 1 }, { contextLength })
  const emoji = '\u{1F600}'.repeat(40_000)
  const { result, maxDelayMs, healthAnswers } = await measured(api, async () => await Promise.all([
    api.post('/v1/chat/completions', { model: TINY_MODEL_ID, messages: [{ role: 'user', content: emoji }], max_tokens: 2 }),
    api.post('/v1/completions', { model: TINY_MODEL_ID, prompt: emoji, max_tokens: 2 }),
    api.post('/v1/tokenize', { model: TINY_MODEL_ID, content: emoji })
  ]))
  const [chat, completion, tokenized] = result
  for (const [res, param] of [[chat, 'messages'], [completion, 'prompt']] as const) {
    assert.equal(res.status, 400, JSON.stringify(res.body))
    assert.equal(res.body.error.param, param)
    assert.match(res.body.error.message, /takes? 1600\d\d tokens; model tiny-chat has room for 32766 per request/)
  }
  // /v1/tokenize has no context to fit: it answers, from the other thread
  assert.equal(tokenized.status, 200)
  // SentencePiece's space before the text, then four byte tokens an emoji
  assert.equal(tokenized.body.tokens.length, 1 + 4 * 40_000)
  assert.ok(maxDelayMs < MAX_LOOP_DELAY_MS, `the event loop was held for ${maxDelayMs} ms`)
  assert.ok(healthAnswers > 0)

  // What the thread makes is exactly what the model makes on the loop, for plain text and for a rendered chat
  const llama = await getSharedLlama(1)
  const reference = await llama.loadModel({ modelPath, vocabOnly: true })
  t.after(async () => { await reference.dispose() })
  // Long words of the vocabulary, a few others: over the 32 KiB tokenized on the loop, in few tokens to evaluate
  const words = Array.from({ length: 4_500 }, (_, i) => ['question', 'network', 'Ünïcode', 'answer', 'people', '\u{1F600}'][i % 6]).join(' ')
  assert.ok(Buffer.byteLength(words) > 32 * 1024)
  const thread = await api.post('/v1/tokenize', { model: TINY_MODEL_ID, content: words })
  assert.equal(thread.status, 200)
  assert.deepEqual(thread.body.tokens, Array.from(reference.tokenize(words, false)))
  const answered = await api.post('/v1/chat/completions', { model: TINY_MODEL_ID, messages: [{ role: 'user', content: words }], max_tokens: 2 })
  assert.equal(answered.status, 200, JSON.stringify(answered.body))
  assert.ok(answered.body.usage.prompt_tokens > thread.body.tokens.length)
  // A completion's prompt is the beginning token and the text as LlamaCompletion tokenizes it
  const completed = await api.post('/v1/completions', { model: TINY_MODEL_ID, prompt: words, max_tokens: 2 })
  assert.equal(completed.status, 200, JSON.stringify(completed.body))
  assert.equal(completed.body.usage.prompt_tokens, 1 + reference.tokenize(words, false, 'trimLeadingSpace').length)
})

test('the same chat sent to a peer is refused by the serving peer with a 400, neither node held', async (t) => {
  const relay = await startTestRelay(t)
  const dir = await tempDir(t, 'meshnode-model-')
  const model = await writeTinyGguf(join(dir, 'tiny.gguf'), { seed: 7 })
  const serving = await startTestNode(t, { network: FAST_NETWORK, p2pListen: [] })
  await serving.node.engine.load(TINY_MODEL_ID, model.path)
  const asking = await startTestNode(t, { network: FAST_NETWORK, p2pListen: [] })
  for (const node of [serving, asking]) assert.equal((await node.api.patch('/v1/app/settings', wanSettings(relay))).status, 200)
  await waitForPeers(asking, [serving.nodeID], { timeoutMs: 120_000 })
  await waitForPeers(serving, [asking.nodeID], { timeoutMs: 120_000 })
  const { result, maxDelayMs, healthAnswers } = await measured(serving.api, async () =>
    await asking.api.post('/v1/chat/completions', { model: TINY_MODEL_ID, messages: [{ role: 'user', content: EMOJI }], max_tokens: 2 }))
  assert.equal(result.status, 400, JSON.stringify(result.body))
  // Only the serving peer has the model, and so the bound
  assert.match(result.body.error.message, /10400\d\d bytes of text; model tiny-chat reads at most/)
  assert.ok(maxDelayMs < MAX_LOOP_DELAY_MS, `the event loop was held for ${maxDelayMs} ms`)
  assert.ok(healthAnswers > 0)
})
