// POST /v1/tokenize and /v1/detokenize, and logit_bias, on the tiny GGUF.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { startChatNode, TINY_MODEL_ID } from '../support/chat-node.ts'

const hello = [{ role: 'user' as const, content: 'Tell me a story about a cat.' }]

test('tokenize and detokenize round-trip; add_special puts the beginning token first; unknown ids are refused', async (t) => {
  const { api } = await startChatNode(t)
  for (const content of ['hello world', 'The node answers: 42 peers, ünïcode and <|im_end|> as plain text.', '']) {
    const { status, body } = await api.post('/v1/tokenize', { model: TINY_MODEL_ID, content })
    assert.equal(status, 200, JSON.stringify(body))
    assert.ok(Array.isArray(body.tokens) && body.tokens.every(Number.isInteger))
    const back = await api.post('/v1/detokenize', { model: TINY_MODEL_ID, tokens: body.tokens })
    assert.equal(back.status, 200)
    assert.equal(back.body.content, content)
  }
  const plain = (await api.post('/v1/tokenize', { model: TINY_MODEL_ID, content: 'hello' })).body.tokens
  const special = (await api.post('/v1/tokenize', { model: TINY_MODEL_ID, content: 'hello', add_special: true })).body.tokens
  assert.deepEqual(special.slice(1), plain)
  assert.equal(special.length, plain.length + 1)
  // A marker typed in the text is text, not the template's control token
  const marker = (await api.post('/v1/tokenize', { model: TINY_MODEL_ID, content: '<|im_end|>' })).body.tokens
  assert.ok(marker.length > 1)

  const refusals: Array<[string, Record<string, unknown>, string]> = [
    ['/v1/detokenize', { model: TINY_MODEL_ID, tokens: [5, 1_000_000] }, 'tokens.1'],
    ['/v1/detokenize', { model: TINY_MODEL_ID, tokens: [-1] }, 'tokens.0'],
    ['/v1/detokenize', { model: TINY_MODEL_ID, tokens: [1.5] }, 'tokens.0'],
    ['/v1/detokenize', { model: TINY_MODEL_ID }, 'tokens'],
    ['/v1/tokenize', { model: TINY_MODEL_ID, content: 7 }, 'content'],
    ['/v1/tokenize', { content: 'x' }, 'model']
  ]
  for (const [path, body, param] of refusals) {
    const res = await api.post(path, body)
    assert.equal(res.status, 400, `${param}: ${JSON.stringify(res.body)}`)
    assert.equal(res.body.error.param, param, JSON.stringify(res.body))
  }
  const unknown = await api.post('/v1/tokenize', { model: 'not-here', content: 'x' })
  assert.equal(unknown.status, 404)
  assert.equal(unknown.body.error.type, 'not_found')
  assert.equal((await api.post('/v1/tokenize', { model: TINY_MODEL_ID, content: 'still alive' })).status, 200, 'an out-of-vocabulary id did not take the node down')
})

test('logit_bias: -100 on the tokens of the greedy answer changes it; +100 on one token makes it the answer', async (t) => {
  const { openai, api } = await startChatNode(t)
  const ask = async (bias?: Record<string, number>): Promise<string> => {
    const completion = await openai.chat.completions.create({ model: TINY_MODEL_ID, messages: hello, max_tokens: 8, temperature: 0, logit_bias: bias })
    return completion.choices[0].message.content ?? ''
  }
  const greedy = await ask()
  const { body: { tokens } } = await api.post('/v1/tokenize', { model: TINY_MODEL_ID, content: greedy })
  const banned = Object.fromEntries((tokens as number[]).map((token) => [String(token), -100]))
  const changed = await ask(banned)
  assert.notEqual(changed, greedy, 'banning the greedy answer\'s tokens changes the answer')
  assert.equal(await ask(banned), changed, 'and the biased answer is as deterministic as any greedy one')
  assert.equal(await ask({ [String(tokens[0])]: 0 }), greedy, 'a bias of 0 changes nothing')

  const { body: { tokens: [forced] } } = await api.post('/v1/tokenize', { model: TINY_MODEL_ID, content: 'peer' })
  const { body: { content: piece } } = await api.post('/v1/detokenize', { model: TINY_MODEL_ID, tokens: [forced] })
  assert.equal(piece.trim(), 'peer')
  assert.equal(await ask({ [String(forced)]: 100 }), Array(8).fill('peer').join(' '), '+100 all but forces the token')

  // Completions take logit_bias too
  const plain = await openai.completions.create({ model: TINY_MODEL_ID, prompt: 'Once', max_tokens: 4, temperature: 0 })
  const biased = await openai.completions.create({ model: TINY_MODEL_ID, prompt: 'Once', max_tokens: 4, temperature: 0, logit_bias: { [String(forced)]: 100 } })
  assert.notEqual(biased.choices[0].text, plain.choices[0].text)
})
