// The serving side of the infer protocol facing a requester that stops reading its answer, on an in-memory yamux
// stream (test/support/yamux-pair.ts: a paused reader closes the writer's window, as over a real connection). The
// handler runs over the real serving policy, with `org_capacity_reservation` leaving one slot to outsiders; the engine
// is a stand-in that talks as fast as its answer is taken (the tiny GGUF's few tokens would take minutes to fill a
// 256 KiB window). A frame that does not leave within the write deadline resets the stream, which cancels the
// generation and ends its admission: the next outsider gets the slot.
import assert from 'node:assert/strict'
import { test, type TestContext } from 'node:test'
import type { Stream } from '@libp2p/interface'
import { pino } from 'pino'
import { generateSeed, identityFromSeed } from '../../src/identity/index.ts'
import type { GenerateOptions, InferenceEvent, InferenceRequest } from '../../src/inference/index.ts'
import { sameModel } from '../../src/models/index.ts'
import { INFER_PROTOCOL, InferFrame, MAX_INFER_RESPONSE_FRAME_BYTES, createInferHandler } from '../../src/remote/infer.ts'
import { ServingPolicy, type ServingPolicyDeps } from '../../src/serving/index.ts'
import { openFrames, readMessage, writeMessage, type FrameStream } from '../../src/wire/index.ts'
import { yamuxPair } from '../support/yamux-pair.ts'

const log = pino({ level: 'silent' })
const outsider = identityFromSeed(generateSeed())
const MODEL = 'talkative-model'
/** The deadline of the handler whose requester stops reading: short, for the test. */
const WRITE_TIMEOUT_MS = 500

/** An engine of two slots answering a chat with `maxTokens` deltas of 4 KiB, as fast as they are taken; it stops when its signal aborts. */
function talkativeEngine (served: { started: number, stopped: number }): ServingPolicyDeps['engine'] {
  return {
    async * serve (request: InferenceRequest, options: GenerateOptions): AsyncGenerator<InferenceEvent, void, undefined> {
      served.started++
      try {
        const tokens = request.kind === 'chat' ? request.maxTokens ?? 1 : 1
        for (let i = 0; i < tokens; i++) {
          options.signal?.throwIfAborted()
          yield { type: 'delta', text: 'x'.repeat(4096) }
          await new Promise(resolve => setImmediate(resolve))
        }
        yield { type: 'done', finishReason: 'length', usage: { promptTokens: 1, completionTokens: tokens, totalTokens: tokens + 1, cachedTokens: 0 } }
      } finally {
        served.stopped++
      }
    },
    stats: () => ({ slots: 2 }),
    loaded: () => ({ modelID: MODEL }),
    loadedModels: () => [{ modelID: MODEL }]
  }
}

/** Runs the handler on the serving end of a new stream, as the outsider; resolves to what it threw, or null. */
async function serve (t: TestContext, handler: ReturnType<typeof createInferHandler>): Promise<{ asker: Stream, server: Stream, frames: FrameStream, served: Promise<unknown> }> {
  const [asker, server] = await yamuxPair(t, INFER_PROTOCOL)
  const served = handler(server, { nodeID: outsider.nodeID, connection: null as never }).then(() => null, (err: unknown) => {
    server.abort(err instanceof Error ? err : new Error(String(err)))
    return err
  })
  const frames = openFrames(asker, { maxFrameBytes: MAX_INFER_RESPONSE_FRAME_BYTES })
  return { asker, server, frames, served }
}

const chat = (maxTokens: number): object => ({ modelID: MODEL, request: { kind: 'chat', messages: [{ role: 'user', content: 'Talk.' }], maxTokens }, ptnID: null })

test('a requester that stops reading: its stream is reset at the write deadline, the generation stops, and its slot goes to the next outsider', { timeout: 120_000 }, async (t) => {
  const served = { started: 0, stopped: 0 }
  const policy = new ServingPolicy({
    engine: talkativeEngine(served),
    sameModel,
    settings: { get: () => ({ org_capacity_reservation: 0.5, inference_backend: 'llama.cpp' }) },   // one of the two slots for outsiders
    ptn: { memberPtnIDs: () => [] },
    peers: { peer: () => null },
    recordDemand: () => undefined,
    log
  })
  const handler = createInferHandler({ policy, log }, { writeTimeoutMs: WRITE_TIMEOUT_MS })

  // Asks for an answer far larger than a window, and stops reading once the first frames arrived.
  const stalled = await serve(t, handler)
  await writeMessage(stalled.frames, chat(1_000_000))
  await stalled.asker.close()
  assert.equal((await readMessage(stalled.frames, InferFrame, { timeoutMs: 30_000 })).type, 'delta')
  stalled.asker.pause()
  assert.equal(await stalled.served, null, 'the handler ended: the requester left, which is no failure of ours')
  assert.equal(stalled.server.status, 'aborted', 'the node reset the stream it could not write to')
  assert.equal(served.started, 1)
  assert.equal(served.stopped, 1, 'the generation stopped')
  assert.equal(policy.publicActive, 0, 'its admission ended')

  // The one slot open to outsiders is free again: the next request is served in full, not told busy (by a handler
  // of the default deadline, which a loaded machine's pause cannot reach)
  const next = await serve(t, createInferHandler({ policy, log }))
  await writeMessage(next.frames, chat(3))
  await next.asker.close()
  const frames: string[] = []
  for (;;) {
    const frame = await readMessage(next.frames, InferFrame, { timeoutMs: 30_000 })
    frames.push(frame.type)
    if (frame.type === 'done' || frame.type === 'error') break
  }
  assert.equal(frames.at(-1), 'done', frames.join(', '))
  assert.equal(await next.served, null)
  assert.equal(policy.publicActive, 0)
})
