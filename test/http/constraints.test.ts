// A grammar the request asks for (response_format, tools) that llama.cpp cannot build or cannot satisfy is the
// caller's 400 naming the parameter: before generation where that can be known, as an error event in the stream
// where it shows only while generating. Nothing of it is logged as the node's error.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { join } from 'node:path'
import { Writable } from 'node:stream'
import { collectSse, TINY_MODEL_ID } from '../support/chat-node.ts'
import { startTestNode, tempDir } from '../support/node.ts'
import { writeTinyGguf } from '../support/tiny-gguf.ts'

const hello = [{ role: 'user' as const, content: 'hello' }]
/** The tiny GGUF's byte tokens follow <unk>, <s> and </s>: byte b is token 3 + b. */
const byteToken = (char: string): number => 3 + char.charCodeAt(0)
const arrayOf = (schema: object): object => ({ type: 'json_schema', json_schema: { name: 'out', schema } })

test('grammar refusals are 400s naming the parameter, before or during generation; none is logged as an error', async (t) => {
  const lines: string[] = []
  const sink = new Writable({ write (chunk, _encoding, done) { lines.push(...String(chunk).split('\n').filter((l) => l !== '')); done() } })
  const dir = await tempDir(t, 'meshnode-model-')
  const { path } = await writeTinyGguf(join(dir, 'tiny.gguf'), { seed: 7, contextLength: 4096 })
  const { node, api } = await startTestNode(t, { logLevel: 'info', contextSize: 4096 }, { logDestination: sink })
  await node.engine.load(TINY_MODEL_ID, path)
  const tokensOf = async (content: string): Promise<number[]> => (await api.post('/v1/tokenize', { model: TINY_MODEL_ID, content })).body.tokens
  const brace = (await tokensOf('{')).at(-1) as number
  const comma = (await tokensOf(',')).at(-1) as number
  const banBrace = { [brace]: -100, [byteToken('{')]: -100 }

  const cases: Array<[string, Record<string, unknown>, string, RegExp]> = [
    ['json_object with { banned', { response_format: { type: 'json_object' }, logit_bias: banBrace }, 'logit_bias', /logit_bias bans every token response_format allows next/],
    ['minItems 5000', { response_format: arrayOf({ type: 'array', items: { type: 'integer' }, minItems: 5000 }) }, 'response_format.json_schema.schema.minItems',
      /response_format.json_schema.schema.minItems is 5000; constrained output can require at most 1000/],
    ['minLength 1e9', { response_format: arrayOf({ type: 'string', minLength: 1e9 }) }, 'response_format.json_schema.schema.minLength', /minLength is 1000000000/],
    ['a tool parameter of minLength 100000', {
      tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object', properties: { s: { type: 'string', minLength: 100_000 } }, required: ['s'] } } }],
      tool_choice: 'required'
    }, 'tools.0.function.parameters.properties.s.minLength', /minLength is 100000/]
  ]
  for (const [what, extra, param, message] of cases) {
    for (const stream of [false, true]) {
      const res = await api.post('/v1/chat/completions', { model: TINY_MODEL_ID, messages: hello, max_tokens: 8, stream, ...extra })
      assert.equal(res.status, 400, `${what}, stream ${stream}: ${JSON.stringify(res.body)}`)
      assert.equal(res.body.error.param, param, what)
      assert.match(res.body.error.message, message)
    }
  }
  // The largest least count llama.cpp's grammar takes is accepted, and a most count of any size
  for (const schema of [{ minItems: 1000 }, { maxItems: 1_000_000 }]) {
    const largest = await api.post('/v1/chat/completions', { model: TINY_MODEL_ID, messages: hello, max_tokens: 4, response_format: arrayOf({ type: 'array', items: { type: 'integer' }, ...schema }) })
    assert.equal(largest.status, 200, JSON.stringify(largest.body))
  }

  // Known only while generating: an array needs a comma after its first item, and every comma is banned. The stream
  // has opened; the refusal comes as its error event, then [DONE].
  const midway = await fetch(`${api.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({
      model: TINY_MODEL_ID, messages: hello, max_tokens: 40, stream: true, temperature: 0,
      logit_bias: { [comma]: -100, [byteToken(',')]: -100 }, response_format: arrayOf({ type: 'array', items: { type: 'integer' }, minItems: 3 })
    })
  })
  assert.equal(midway.status, 200)
  const { data } = await collectSse(midway)
  assert.equal(data.at(-1), '[DONE]')
  const error = JSON.parse(data.at(-2) as string)
  assert.equal(error.error.param, 'logit_bias', JSON.stringify(data))
  assert.equal(JSON.parse(data[1]).choices[0].delta.content, '[', 'the answer had begun')

  const errors = lines.map((line) => JSON.parse(line) as { level: number, msg: string }).filter((line) => line.level >= 50)
  assert.deepEqual(errors, [], 'no error-level log line')
})
