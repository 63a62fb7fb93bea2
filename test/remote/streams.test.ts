// A chat placed on a peer opens its stream at once, and a client that leaves while the peer has not
// started is an outcome logged once, not a 500 with a stack.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { join } from 'node:path'
import { Writable } from 'node:stream'
import { readSse } from '../../src/cli/sse.ts'
import { startTestNode, tempDir, waitFor } from '../support/node.ts'
import { FAST_NETWORK, startTestRelay, waitForPeers, wanSettings } from '../support/network.ts'
import { writeTinyGguf } from '../support/tiny-gguf.ts'

const MODEL = 'tiny-chat'
const hello = [{ role: 'user', content: 'Tell me a story about a cat.' }]

test('a chat placed on a busy peer streams at once; the client leaving before its first token is logged once, at info', async (t) => {
  const relay = await startTestRelay(t)
  const { path } = await writeTinyGguf(join(await tempDir(t, 'meshnode-model-'), 'tiny.gguf'), { seed: 7, contextLength: 4096 })
  const lines: string[] = []
  const sink = new Writable({ write (chunk, _encoding, done) { lines.push(...String(chunk).split('\n').filter((l) => l !== '')); done() } })
  const asker = await startTestNode(t, { network: FAST_NETWORK, logLevel: 'info' }, { logDestination: sink })
  const server = await startTestNode(t, { network: FAST_NETWORK, slots: 1, contextSize: 4096 })
  await server.node.engine.load(MODEL, path)
  for (const node of [asker, server]) assert.equal((await node.api.patch('/v1/app/settings', wanSettings(relay))).status, 200)
  await Promise.all([waitForPeers(asker, [server.nodeID]), waitForPeers(server, [asker.nodeID])])
  await waitFor(async () => (await asker.api.get('/v1/models')).body.data.some((m: { id: string }) => m.id === MODEL), { what: 'the peer\'s model listed' })

  // The peer's only slot is taken by a long local generation (greedy: the tiny model never stops by itself).
  const holder = new AbortController()
  const held = await fetch(`${server.node.url}/v1/chat/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' }, signal: holder.signal,
    body: JSON.stringify({ model: MODEL, messages: hello, max_tokens: 100_000, temperature: 0, stream: true })
  })
  await waitFor(() => server.node.engine.stats().busySlots === 1, { what: 'the peer\'s slot to be taken' })

  const client = new AbortController()
  const response = await fetch(`${asker.node.url}/v1/chat/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' }, signal: client.signal,
    body: JSON.stringify({ model: MODEL, messages: hello, max_tokens: 8, stream: true })
  })
  // Headers and a first comment come while the request waits in the peer's queue, long before any token.
  assert.equal(response.status, 200)
  assert.equal(response.headers.get('x-served-by'), `peer:${server.nodeID}`)
  const comments: string[] = []
  const deltas: unknown[] = []
  const reading = (async () => {
    for await (const event of readSse(response, { onComment: (text) => { comments.push(text) } })) {
      deltas.push((JSON.parse(event.data) as { choices: Array<{ delta: unknown }> }).choices[0].delta)
    }
  })()
  await waitFor(() => comments.includes('stream opened'), { what: 'the stream to open' })
  await waitFor(() => server.node.engine.stats().queued === 1, { what: 'the request to wait in the peer\'s queue' })

  assert.deepEqual(deltas, [{ role: 'assistant', content: '' }], 'the role chunk, and no token yet')
  client.abort()
  await assert.rejects(reading, (err: Error) => err.name === 'AbortError')
  // The peer drops the request (its stream was reset), and the asker logs the outcome once, at info.
  await waitFor(() => server.node.engine.stats().queued === 0, { what: 'the peer to drop the request' })
  const LEFT = 'client disconnected before the response was complete'
  await waitFor(() => lines.some((line) => line.includes(LEFT)), { what: 'the outcome to be logged' })
  holder.abort()
  await assert.rejects(held.text(), (err: Error) => err.name === 'AbortError')

  const records = lines.map((line) => JSON.parse(line) as { level: number, msg: string, reqId?: string })
  assert.deepEqual(records.filter((r) => r.level >= 50).map((r) => r.msg), [], 'nothing was logged as an error')
  const outcomes = records.filter((r) => r.msg === LEFT)
  assert.equal(outcomes.length, 1, 'logged once')
  assert.equal(outcomes[0].level, 30)
})
