// Streams that behave: SSE writes respect backpressure, so a client that reads slowly (or not at
// all) never grows the node's memory without bound, and the node answers a stream it can wait on in full.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { request as httpRequest, type IncomingMessage } from 'node:http'
import type { Socket } from 'node:net'
import { createServer } from 'node:http'
import { SSE_HEADERS, SseStream } from '../../src/http/sse.ts'
import { startTestNode, waitFor } from '../support/node.ts'

/** Opens a GET and pauses the response at once: the client reads nothing until `resume`. */
async function pausedGet (url: string): Promise<{ response: IncomingMessage, received: () => number, ended: Promise<'end' | 'close'> }> {
  const response = await new Promise<IncomingMessage>((resolve, reject) => {
    httpRequest(url, resolve).on('error', reject).end()
  })
  response.pause()
  let received = 0
  response.on('data', (chunk: Buffer) => { received += chunk.length })
  const ended = new Promise<'end' | 'close'>((resolve) => {
    response.once('end', () => { resolve('end') })
    response.once('close', () => { resolve('close') })
    response.once('error', () => { resolve('close') })
  })
  return { response, received: () => received, ended }
}

/** Bytes Node holds for a server-side socket: queued in the socket and in whatever writes into it. */
function queuedBytes (socket: Socket): number {
  return socket.writableLength
}

test('a writer that waits on drained() stops while its client does not read, holds little, and delivers everything in order', async (t) => {
  const EVENT = 'x'.repeat(16 * 1024)
  const TOTAL = 4000 // 64 MiB: far more than the kernel's socket buffers hold
  const progress = { written: 0, maxQueued: 0, done: false }
  // A plain HTTP server: the unit under test is SseStream on a real response and socket.
  const sockets: Socket[] = []
  let writer: Promise<void> | null = null
  const server = createServer((_request, raw) => {
    raw.writeHead(200, SSE_HEADERS)
    const out = new SseStream(raw)
    writer = (async () => {
      for (let i = 0; i < TOTAL; i++) {
        out.data({ i, EVENT })
        await out.drained()
        progress.written = i + 1
        progress.maxQueued = Math.max(progress.maxQueued, raw.writableLength + (raw.socket?.writableLength ?? 0))
      }
      out.end('data: [DONE]\n\n')
      progress.done = true
    })()
  })
  server.on('connection', (socket: Socket) => { sockets.push(socket) })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.after(() => new Promise<void>((resolve) => { server.closeAllConnections(); server.close(() => { resolve() }) }))
  const address = server.address()
  assert.ok(address != null && typeof address === 'object')

  const client = await pausedGet(`http://127.0.0.1:${address.port}/stream`)
  // The writer runs until the socket is full, then waits: it stalls far short of the total.
  await waitFor(async () => {
    const before = progress.written
    await new Promise((resolve) => setTimeout(resolve, 300))
    return progress.written === before && progress.written > 0
  }, { what: 'the writer to stall on the full socket', timeoutMs: 60_000 })
  assert.ok(progress.written < TOTAL / 2, `wrote ${progress.written} of ${TOTAL} events to a client that reads nothing`)
  assert.ok(progress.maxQueued < 1024 * 1024, `Node held ${progress.maxQueued} bytes for the slow client`)
  assert.ok(sockets.every((socket) => queuedBytes(socket) < 1024 * 1024))

  // Reading resumes: every event arrives, in order, then [DONE].
  let text = ''
  let next = 0
  client.response.setEncoding('utf8')
  client.response.on('data', (chunk: string) => {
    text += chunk
    let end: number
    while ((end = text.indexOf('\n\n')) !== -1) {
      const block = text.slice(0, end)
      text = text.slice(end + 2)
      if (!block.startsWith('data: {')) continue
      assert.equal((JSON.parse(block.slice(6)) as { i: number }).i, next++)
    }
  })
  client.response.resume()
  assert.equal(await client.ended, 'end')
  await writer
  assert.equal(next, TOTAL)
  assert.ok(progress.done)
})

test('a live event stream whose client stops reading is cut at its bound; the node keeps no more for it', async (t) => {
  const node = await startTestNode(t)
  const sockets: Socket[] = []
  node.node.http.server.on('connection', (socket: Socket) => { sockets.push(socket) })
  const slow = await pausedGet(`${node.node.url}/v1/app/events`)
  await waitFor(() => sockets.length > 0, { what: 'the events connection' })
  const memoryBefore = process.memoryUsage().rss
  // 1 GiB of events in all if it were kept: a node without a bound would hold nearly all of it.
  const error = 'e'.repeat(256 * 1024)
  for (let i = 0; i < 4096; i++) {
    node.node.models.events.emit('model.load_failed', { modelID: `m${i}`, error })
    if (i % 64 === 0) await new Promise((resolve) => setImmediate(resolve)) // let the socket move what it can
  }
  await waitFor(() => sockets.every((socket) => socket.destroyed), { what: 'the node to drop the client that reads nothing' })
  // Had the node kept what it could not send, it would hold about 1 GiB now.
  assert.ok(process.memoryUsage().rss - memoryBefore < 256 * 1024 * 1024, `rss grew by ${process.memoryUsage().rss - memoryBefore} bytes`)
  // What the client gets once it reads again: the events the kernel held, then the end of a cut connection.
  slow.response.resume()
  assert.equal(await slow.ended, 'close')
  assert.ok(slow.received() < 64 * 1024 * 1024, `it was sent ${slow.received()} bytes, not the whole 1 GiB`)
  // A reader that keeps up is not affected, and the node serves on.
  const fast = await fetch(`${node.node.url}/v1/app/events`)
  assert.equal(fast.status, 200)
  await fast.body?.cancel()
  assert.equal((await node.api.get('/health')).status, 200)
})
