// JSON nested too deep, from a peer: JSON.parse reads it, but JSON.stringify, canonical JSON, zod's z.json() and any
// other recursive walk overflow the stack on it. A frame, an envelope or a field nested past its bound is a
// ProtocolError (what costs a peer its stream and a ban), never a RangeError from wherever it is walked next.
import assert from 'node:assert/strict'
import { test } from 'node:test'
import { streamPair } from '@libp2p/utils'
import { z } from 'zod'
import { generateSeed, identityFromSeed } from '../../src/identity/index.ts'
import { InferFrame, InferRequest, MAX_INFER_REQUEST_BYTES } from '../../src/remote/infer-wire.ts'
import {
  JsonObject, JsonText, JsonValue, MAX_JSON_DEPTH, MAX_MESSAGE_DEPTH, ProtocolError, canonicalJson, isHostile, jsonDepthExceeds,
  jsonTextDepthExceeds, openEnvelope, openFrames, parseWith, readMessage, signEnvelope, verifyCanonical
} from '../../src/wire/index.ts'

const DEEP = 10_000

/** Arrays nested `depth` levels around one number, as JSON text. */
function nestedText (depth: number): string {
  return '['.repeat(depth) + '1' + ']'.repeat(depth)
}

/** The same as a value, built without recursion. */
function nested (depth: number): unknown {
  return JSON.parse(nestedText(depth))
}

function isProtocolError (code: ProtocolError['code']): (err: unknown) => boolean {
  return (err) => {
    assert.ok(err instanceof ProtocolError, `expected a ProtocolError, got ${String(err)}`)
    assert.equal(err.code, code, err.message)
    assert.ok(isHostile(err))
    return true
  }
}

test('the checks walk without recursion: exact at the bound, and any depth costs no stack', () => {
  assert.equal(jsonDepthExceeds(nested(MAX_JSON_DEPTH)), false)
  assert.equal(jsonDepthExceeds(nested(MAX_JSON_DEPTH + 1)), true)
  assert.equal(jsonDepthExceeds(nested(500_000)), true)
  assert.equal(jsonDepthExceeds('scalar'), false)
  assert.equal(jsonDepthExceeds({ a: [{ b: {} }] }, 4), false)
  assert.equal(jsonDepthExceeds({ a: [{ b: {} }] }, 3), true)

  assert.equal(jsonTextDepthExceeds(nestedText(MAX_JSON_DEPTH)), false)
  assert.equal(jsonTextDepthExceeds(nestedText(MAX_JSON_DEPTH + 1)), true)
  assert.equal(jsonTextDepthExceeds(nestedText(500_000)), true)
  // Brackets inside strings are text, and text that is no JSON is plain text however it looks
  assert.equal(jsonTextDepthExceeds(JSON.stringify({ a: '['.repeat(1000) })), false)
  assert.equal(jsonTextDepthExceeds(JSON.stringify({ a: '\\"' + '['.repeat(1000) })), false)
  assert.equal(jsonTextDepthExceeds('['.repeat(1000) + ' and some prose'), false)
})

test('JsonValue and JsonObject: z.json() bounded to MAX_JSON_DEPTH, refusing any depth with an issue instead of a RangeError', () => {
  assert.ok(JsonValue.safeParse(nested(MAX_JSON_DEPTH)).success)
  assert.ok(JsonObject.safeParse({ a: nested(MAX_JSON_DEPTH - 1) }).success)
  for (const [schema, value] of [[JsonValue, nested(DEEP)], [JsonObject, { a: nested(DEEP) }], [JsonObject, { a: nested(MAX_JSON_DEPTH) }]] as const) {
    const result = schema.safeParse(value)
    assert.equal(result.success, false)
    assert.match(result.error?.issues[0].message ?? '', new RegExp(`deeper than ${MAX_JSON_DEPTH} levels`))
  }
  // What z.json() refuses, these refuse too
  for (const value of [undefined, Infinity, new Date(), { a: () => 1 }, [1n]]) assert.equal(JsonValue.safeParse(value).success, false, String(value))
  assert.equal(JsonObject.safeParse([1]).success, false)
  assert.deepEqual(JsonValue.parse({ a: [1, 'b', null, true] }), { a: [1, 'b', null, true] })
  assert.equal(JsonText.safeParse(nestedText(DEEP)).success, false)
  assert.ok(JsonText.safeParse('not JSON, just [[[ text').success)
})

test('a frame nested deeper than MAX_MESSAGE_DEPTH is malformed before its schema sees it', async () => {
  for (const depth of [MAX_MESSAGE_DEPTH + 1, DEEP, 100_000]) {
    const [asker, server] = await streamPair()
    const frames = openFrames(asker, { maxFrameBytes: 1024 * 1024 })
    const reading = readMessage(openFrames(server, { maxFrameBytes: 1024 * 1024 }), z.unknown(), { timeoutMs: 5_000 })
    await frames.lp.write(new TextEncoder().encode(`{"value":${nestedText(depth)}}`))
    await assert.rejects(reading, isProtocolError('malformed'), `depth ${depth}`)
    asker.abort(new Error('test done'))
  }
  const [asker, server] = await streamPair()
  const reading = readMessage(openFrames(server), z.object({ value: z.unknown() }), { timeoutMs: 5_000 })
  await openFrames(asker).lp.write(new TextEncoder().encode(`{"value":${nestedText(MAX_MESSAGE_DEPTH - 1)}}`))
  assert.equal(jsonDepthExceeds((await reading).value, MAX_MESSAGE_DEPTH - 1), false, 'a frame at the bound is read')
})

test('infer requests: a schema, parameters or arguments nested past MAX_JSON_DEPTH is a ProtocolError, as a frame or parsed; a tool\'s result is text', async () => {
  const hi = [{ role: 'user', content: 'Hi' }]
  const ask = (request: object): object => ({ modelID: 'm', request: { kind: 'chat', ...request }, ptnID: null })
  const asText = (request: object, deep: string): string => JSON.stringify(ask(request)).replace('"__deep__"', deep)
  const cases: Array<[string, object]> = [
    ['a tool\'s parameters', { messages: hi, tools: [{ name: 'f', parameters: { type: 'object', properties: '__deep__' } }] }],
    ['an output schema', { messages: hi, responseFormat: { type: 'json_schema', schema: { type: 'object', properties: '__deep__' } } }]
  ]
  for (const [what, request] of cases) {
    // Past the field's bound, within the frame's: the schema refuses it, naming the field
    const value = JSON.parse(asText(request, nestedText(MAX_JSON_DEPTH))) as unknown
    assert.throws(() => parseWith(InferRequest, value, 'Frame'), (err: unknown) => isProtocolError('invalid')(err) && /deeper than 64 levels/.test((err as Error).message), what)
    // Any depth, parsed: still an issue, never the RangeError z.json() threw
    assert.throws(() => parseWith(InferRequest, JSON.parse(asText(request, nestedText(DEEP))), 'Frame'), isProtocolError('invalid'), `${what}, ${DEEP} deep`)
    // And as a frame, refused before it is parsed against any schema
    const [asker, server] = await streamPair()
    const reading = readMessage(openFrames(server, { maxFrameBytes: MAX_INFER_REQUEST_BYTES }), InferRequest, { timeoutMs: 5_000 })
    await openFrames(asker, { maxFrameBytes: MAX_INFER_REQUEST_BYTES }).lp.write(new TextEncoder().encode(asText(request, nestedText(DEEP))))
    await assert.rejects(reading, isProtocolError('malformed'), `${what} as a frame`)
    asker.abort(new Error('test done'))
  }
  // JSON text nested too deep where the engine reads it as JSON, a call's arguments, is refused
  const call = { role: 'assistant', content: '', toolCalls: [{ id: 'c', name: 'f', arguments: '{}' }] }
  const deepArguments = [...hi, { ...call, toolCalls: [{ id: 'c', name: 'f', arguments: nestedText(DEEP) }] }]
  assert.throws(() => parseWith(InferRequest, ask({ messages: deepArguments }), 'Frame'), (err: unknown) => isProtocolError('invalid')(err) && (err as Error).message.includes('messages.1.toolCalls.0.arguments'))
  // A tool's result that deep is read as plain text by the engine (a tool may return an AST): a requester sending
  // one is served, never banned; so is a user's text, brackets and all; at the bound everything is served
  assert.ok(InferRequest.safeParse(ask({ messages: [...hi, call, { role: 'tool', content: nestedText(DEEP), toolCallID: 'c' }] })).success)
  assert.ok(InferRequest.safeParse(ask({ messages: [{ role: 'user', content: nestedText(DEEP) }] })).success)
  assert.ok(InferRequest.safeParse(ask({ messages: [...hi, call, { role: 'tool', content: nestedText(MAX_JSON_DEPTH), toolCallID: 'c' }], tools: [{ name: 'f', parameters: { a: nested(MAX_JSON_DEPTH - 1) } }] })).success)
  // An answer frame has no free JSON: a deep one is refused by its shape
  assert.equal(InferFrame.safeParse({ type: 'delta', text: nested(DEEP) }).success, false)
})

test('envelopes: a body nested too deep is invalid before its signature is checked; canonical JSON refuses to write one', () => {
  const alice = identityFromSeed(generateSeed())
  const envelope = signEnvelope(alice, { n: 1 }, { domain: 'test' })
  for (const body of [{ n: 1, extra: nested(DEEP) }, nested(DEEP)]) {
    assert.throws(() => openEnvelope({ ...envelope, body }, z.object({ n: z.number() }), { domain: 'test' }), isProtocolError('invalid'))
  }
  assert.throws(() => canonicalJson(nested(DEEP)), TypeError)
  assert.throws(() => canonicalJson(nested(MAX_MESSAGE_DEPTH + 2)), TypeError)
  assert.equal(canonicalJson(nested(MAX_MESSAGE_DEPTH + 1)), nestedText(MAX_MESSAGE_DEPTH + 1), 'a message at the bound, wrapped once, is written')
  assert.equal(verifyCanonical(alice.nodeID, { body: nested(DEEP), domain: 'test' }, Buffer.from(envelope.signature, 'base64')), false)
})
