// The wire's framing, envelopes and request/response shape on in-memory stream pairs (@libp2p/utils): what a broken,
// hostile or stalled peer sends is a protocol's business, tested in milliseconds without a node.
import assert from 'node:assert/strict'
import { test } from 'node:test'
import type { Stream } from '@libp2p/interface'
import { streamPair } from '@libp2p/utils'
import { z } from 'zod'
import { generateSeed, identityFromSeed } from '../../src/identity/index.ts'
import {
  ProtocolError, askOnStream, backoffDelayMs, canonicalJson, openEnvelope, openFrames, openPeerStream, readMessage, reopenEnvelope,
  requestOnStream, serveRequest, signEnvelope, writeMessage
} from '../../src/wire/index.ts'
import { yamuxPair } from '../support/yamux-pair.ts'

function isProtocolError (code: ProtocolError['code']): (err: unknown) => boolean {
  return (err) => {
    assert.ok(err instanceof ProtocolError, `expected a ProtocolError, got ${String(err)}`)
    assert.equal(err.code, code, err.message)
    return true
  }
}

const Ask = z.object({ n: z.number().int() })
const Answer = z.object({ doubled: z.number().int() })
const Frame = z.discriminatedUnion('type', [
  z.object({ type: z.literal('keepalive') }),
  z.object({ type: z.literal('part'), text: z.string() }),
  z.object({ type: z.literal('end') })
])
const LIMITS = { maxRequestBytes: 1024, maxAnswerBytes: 1024, timeoutMs: 5_000 }

/** The serving end of a pair, running `serve`; whatever it throws aborts its stream, as the network's guard does. */
function serving (stream: Stream, serve: (stream: Stream) => Promise<void>): Promise<unknown> {
  return serve(stream).then(() => null, (err: unknown) => {
    stream.abort(err instanceof Error ? err : new Error(String(err)))
    return err
  })
}

test('one request, one answer: served, checked against its schema, and the stream closed on both sides', async () => {
  const [asker, server] = await streamPair()
  const served = serving(server, async (stream) => {
    await serveRequest(stream, Ask, (ask) => ({ doubled: ask.n * 2 }), { maxRequestBytes: 1024, timeoutMs: 5_000 })
  })
  assert.deepEqual(await requestOnStream(asker, { n: 21 }, Answer, LIMITS), { doubled: 42 })
  assert.equal(await served, null)
})

test('a request the server cannot parse costs the asker its stream, and the server a ProtocolError to report', async () => {
  for (const [what, send, code] of [
    ['oversized', async (frames: ReturnType<typeof openFrames>) => { await frames.lp.write(new Uint8Array(4096).fill(0x20)) }, 'too_large'],
    ['malformed', async (frames: ReturnType<typeof openFrames>) => { await frames.lp.write(new TextEncoder().encode('{"n": ')) }, 'malformed'],
    ['invalid', async (frames: ReturnType<typeof openFrames>) => { await writeMessage(frames, { n: 'twenty' }) }, 'invalid']
  ] as const) {
    const [asker, server] = await streamPair()
    const served = serving(server, async (stream) => {
      await serveRequest(stream, Ask, (ask) => ({ doubled: ask.n * 2 }), { maxRequestBytes: 1024, timeoutMs: 5_000 })
    })
    const frames = openFrames(asker, { maxFrameBytes: 64 * 1024 })
    await send(frames).catch(() => undefined)
    assert.ok(isProtocolError(code)(await served), what)
    await assert.rejects(readMessage(frames, z.unknown(), { timeoutMs: 5_000 }), `${what}: no answer, a reset`)
  }
})

test('a stalled peer: no request within the deadline on one side, no answer within it on the other', async () => {
  const [quietAsker, server] = await streamPair()
  const served = serving(server, async (stream) => {
    await serveRequest(stream, Ask, (ask) => ({ doubled: ask.n * 2 }), { maxRequestBytes: 1024, timeoutMs: 100 })
  })
  assert.ok(isProtocolError('timeout')(await served))
  quietAsker.abort(new Error('test done'))

  const [asker, stalled] = await streamPair()
  stalled.addEventListener('message', () => undefined)   // reads, never answers
  await assert.rejects(requestOnStream(asker, { n: 1 }, Answer, { ...LIMITS, timeoutMs: 100 }), isProtocolError('timeout'))
  assert.equal(asker.status, 'aborted', 'the asker reset the stream it gave up on')
  stalled.abort(new Error('test done'))
})

test('an answer that is oversized, invalid, or ends without its last frame is a ProtocolError', async () => {
  const answering = async (answer: (frames: ReturnType<typeof openFrames>) => Promise<void>): Promise<Stream> => {
    const [asker, server] = await streamPair()
    void serving(server, async (stream) => {
      const frames = openFrames(stream, { maxFrameBytes: 64 * 1024 })
      await readMessage(frames, Ask)
      await answer(frames)
      await stream.close()
    })
    return asker
  }
  await assert.rejects(requestOnStream(await answering(async (f) => { await writeMessage(f, { doubled: 2, pad: 'x'.repeat(2048) }) }), { n: 1 }, Answer, LIMITS), isProtocolError('too_large'))
  await assert.rejects(requestOnStream(await answering(async (f) => { await writeMessage(f, { doubled: 'two' }) }), { n: 1 }, Answer, LIMITS), isProtocolError('invalid'))
  await assert.rejects(requestOnStream(await answering(async () => undefined), { n: 1 }, Answer, LIMITS), isProtocolError('eof'))

  // A streamed answer: keep-alives and parts, then a clean end of stream with no `end` frame is not a complete answer.
  const cut = await answering(async (f) => {
    await writeMessage(f, { type: 'keepalive' })
    await writeMessage(f, { type: 'part', text: 'half an ans' })
  })
  const seen: string[] = []
  await assert.rejects(async () => {
    for await (const frame of askOnStream(cut, { n: 1 }, Frame, (frame) => frame.type === 'end', LIMITS)) seen.push(frame.type)
  }, isProtocolError('eof'))
  assert.deepEqual(seen, ['keepalive', 'part'])
})

test('an asker that stops reading resets the stream: the serving side sees it closed', async () => {
  const [asker, server] = await streamPair()
  const closed = new Promise<void>((resolve) => { server.addEventListener('close', () => { resolve() }, { once: true }) })
  void serving(server, async (stream) => {
    const frames = openFrames(stream)
    await readMessage(frames, Ask)
    for (let i = 0; ; i++) await writeMessage(frames, { type: 'part', text: String(i) })
  })
  for await (const frame of askOnStream(asker, { n: 1 }, Frame, (frame) => frame.type === 'end', LIMITS)) {
    if (frame.type === 'part') break
  }
  await closed
  assert.equal(asker.status, 'aborted')
})

test('a peer that stops reading: a frame it does not take within the write deadline resets the stream and is a timeout', { timeout: 60_000 }, async (t) => {
  const [reader, writer] = await yamuxPair(t, '/test/1')
  reader.pause()   // sends no more window updates: the writer's window closes, and its writes wait
  const frames = openFrames(writer)
  const part = { type: 'part', text: 'x'.repeat(16 * 1024) }
  let written = 0
  await assert.rejects(async () => {
    for (;;) {
      await writeMessage(frames, part, { timeoutMs: 1_000 })
      written++
    }
  }, isProtocolError('timeout'))
  assert.ok(written > 0, 'frames went out while there was room for them')
  assert.equal(writer.status, 'aborted', 'the writer reset the stream it gave up on')
  reader.abort(new Error('test done'))
})

test('a frame is written once all of it has left: a peer that takes part of it and stops is a timeout too', { timeout: 60_000 }, async (t) => {
  const [reader, writer] = await yamuxPair(t, '/test/1')
  reader.pause()
  const frames = openFrames(writer, { maxFrameBytes: 1024 * 1024 })
  // More than two windows of 256 KiB: the first goes at once, and the writer waits for room.
  const writing = writeMessage(frames, { type: 'part', text: 'x'.repeat(600 * 1024) }, { timeoutMs: 1_000 })
  assert.equal(writer.writableNeedsDrain, true)
  // One window update, then none: the frame writer's wait for room ends, and the rest of the frame waits for more.
  reader.resume()
  reader.pause()
  await assert.rejects(writing, isProtocolError('timeout'))
  assert.equal(writer.status, 'aborted', 'a close() after it would have waited for the rest, without a deadline')
})

test('opening a stream to a peer: the caller\'s abort is its own reason, anything else names the peer', async () => {
  const nodeID = identityFromSeed(generateSeed()).nodeID
  const never = { open: async (_nodeID: string, _protocol: string, options?: { signal?: AbortSignal }) => await new Promise<Stream>((_resolve, reject) => { options?.signal?.addEventListener('abort', () => { reject(new Error('dial aborted')) }) }) }
  await assert.rejects(openPeerStream(never, nodeID, '/x/1', { openTimeoutMs: 50 }), (err: unknown) => err instanceof Error && err.name === 'UnavailableError' && err.message.includes(nodeID) && /within 50 ms/.test(err.message))
  const cancel = new AbortController()
  const opening = openPeerStream(never, nodeID, '/x/1', { signal: cancel.signal })
  cancel.abort(new Error('the client left'))
  await assert.rejects(opening, { message: 'the client left' })
})

test('canonical JSON and signed envelopes', () => {
  assert.equal(canonicalJson({ b: [1, { d: null, c: 'x' }], a: true, skipped: undefined }), '{"a":true,"b":[1,{"c":"x","d":null}]}')
  assert.throws(() => canonicalJson({ n: Number.NaN }), TypeError)
  assert.throws(() => canonicalJson({ when: new Date() }), TypeError)

  const alice = identityFromSeed(generateSeed())
  const bob = identityFromSeed(generateSeed())
  const Body = z.object({ amount: z.number() })
  const envelope = signEnvelope(alice, { amount: 5 }, { domain: '/test/1' })
  // The receiver sees the envelope after a JSON round trip, with keys in any order.
  const received: unknown = JSON.parse(JSON.stringify({ signature: envelope.signature, body: envelope.body, signer: envelope.signer }))
  assert.deepEqual(openEnvelope(received, Body, { domain: '/test/1', expectedSigner: alice.nodeID }), { amount: 5 })
  assert.throws(() => openEnvelope({ ...envelope, body: { amount: 6 } }, Body, { domain: '/test/1' }), isProtocolError('bad_signature'))
  assert.throws(() => openEnvelope(envelope, Body, { domain: '/test/2' }), isProtocolError('bad_signature'))
  assert.throws(() => openEnvelope({ ...envelope, signer: bob.nodeID }, Body, { domain: '/test/1' }), isProtocolError('bad_signature'))
  assert.throws(() => openEnvelope(envelope, Body, { domain: '/test/1', expectedSigner: bob.nodeID }), isProtocolError('wrong_signer'))
  assert.throws(() => openEnvelope({ body: { amount: 5 }, signer: alice.nodeID }, Body, { domain: '/test/1' }), isProtocolError('invalid'))
  assert.throws(() => openEnvelope(signEnvelope(alice, { amount: 'x' }, { domain: '/test/1' }), Body, { domain: '/test/1' }), isProtocolError('invalid'))
  // 1e999 parses to Infinity: a body canonical JSON cannot carry is refused as invalid, never a TypeError.
  assert.throws(() => openEnvelope(JSON.parse(`{"body":{"amount":1e999},"signer":"${alice.nodeID}","signature":"${envelope.signature}"}`), Body, { domain: '/test/1' }), isProtocolError('invalid'))
  // What was stored of an envelope (its checked body and signature) is checked again when it is read back.
  assert.deepEqual(reopenEnvelope({ body: { amount: 5 }, signer: alice.nodeID, signature: envelope.signature }, Body, { domain: '/test/1' }).body, { amount: 5 })
  assert.throws(() => reopenEnvelope({ body: { amount: 5 }, signer: bob.nodeID, signature: envelope.signature }, Body, { domain: '/test/1' }), isProtocolError('bad_signature'))
})

test('backoff: doubles from its minimum to its ceiling, with jitter in [0.5, 1]', () => {
  const options = { minMs: 100, maxMs: 1_000 }
  assert.deepEqual([1, 2, 3, 4, 5, 50].map((failures) => backoffDelayMs(failures, options, () => 1)), [100, 200, 400, 800, 1000, 1000])
  assert.deepEqual([1, 2, 5].map((failures) => backoffDelayMs(failures, options, () => 0)), [50, 100, 500])
  for (let failures = 0; failures < 40; failures++) {
    const delay = backoffDelayMs(failures, options)
    assert.ok(delay >= 50 && delay <= 1_000, `${failures}: ${delay}`)
  }
})
