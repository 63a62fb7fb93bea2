// Connection hygiene: slow clients are cut, one address cannot hold every socket, every refusal is in the
// envelope, a wrong method is a 405 with Allow, HEAD is GET without a body, and a client leaving is not an error.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { connect, type Socket } from 'node:net'
import { Writable } from 'node:stream'
import { defaultConfig } from '../../src/config.ts'
import { DEFAULT_CONNECTION_LIMITS } from '../../src/http/connections.ts'
import { startNode } from '../../src/node.ts'
import { startTestNode, tempDir, waitFor } from '../support/node.ts'

interface RawExchange {
  socket: Socket
  /** Everything the node sent, once it closed the connection. */
  closed: Promise<string>
}

function open (port: number): RawExchange {
  const socket = connect(port, '127.0.0.1')
  let received = ''
  socket.on('data', (chunk: Buffer) => { received += chunk.toString() })
  socket.on('error', () => {}) // a reset by the node ends the exchange like a close
  const closed = new Promise<string>((resolve) => socket.once('close', () => { resolve(received) }))
  return { socket, closed }
}

async function exchange (port: number, text: string): Promise<string> {
  const { socket, closed } = open(port)
  socket.write(text)
  return await closed
}

function envelopeOf (response: string): { status: number, body: any } { // eslint-disable-line @typescript-eslint/no-explicit-any
  const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(response)?.[1])
  const body = response.slice(response.indexOf('\r\n\r\n') + 4)
  return { status, body: JSON.parse(body) }
}

function assertEnvelope (body: any, type: string): void { // eslint-disable-line @typescript-eslint/no-explicit-any
  assert.deepEqual(Object.keys(body.error).sort(), ['code', 'message', 'param', 'type'])
  assert.equal(body.error.type, type)
}

test('the defaults are seconds, not minutes', () => {
  assert.ok(DEFAULT_CONNECTION_LIMITS.headersTimeoutMs <= 10_000)
  assert.ok(DEFAULT_CONNECTION_LIMITS.requestTimeoutMs <= 30_000)
  assert.ok(DEFAULT_CONNECTION_LIMITS.keepAliveTimeoutMs <= 10_000)
  assert.ok(DEFAULT_CONNECTION_LIMITS.maxConnectionsPerAddress <= DEFAULT_CONNECTION_LIMITS.maxLoopbackConnections)
})

test('a body trickled one byte at a time is cut with a 408 envelope long before it would finish; so are slow headers', async (t) => {
  const { node } = await startTestNode(t, { http: { headersTimeoutMs: 1_000, requestTimeoutMs: 2_000 } })
  const { socket, closed } = open(node.port)
  const length = 100
  socket.write(`POST /v1/app/apikeys HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: ${length}\r\n\r\n{`)
  let sent = 1
  // One byte every 10 s: the whole body would take over 16 minutes.
  const trickle = setInterval(() => { if (!socket.destroyed) { socket.write(' '); sent++ } }, 10_000)
  t.after(() => { clearInterval(trickle) })
  const response = await closed
  clearInterval(trickle)
  assert.ok(sent < length, `the node closed the connection after ${sent} of ${length} bytes`)
  const { status, body } = envelopeOf(response)
  assert.equal(status, 408)
  assertEnvelope(body, 'request_timeout')

  const slowHeaders = open(node.port)
  slowHeaders.socket.write('GET /health HTTP/1.1\r\nHost: loc')
  const cut = envelopeOf(await slowHeaders.closed)
  assert.equal(cut.status, 408)
  assert.equal((await node.http.inject({ method: 'GET', url: '/v1/app/apikeys' })).json().keys.length, 0, 'nothing was created')
})

test('one address may hold only so many connections; the next is answered 429 and closed; a freed slot is reusable', async (t) => {
  // The loopback cap (a test can only connect from loopback without a network namespace); the network one works alike.
  const { node } = await startTestNode(t, { http: { maxLoopbackConnections: 4 } })
  const held: RawExchange[] = []
  for (let i = 0; i < 4; i++) {
    const connection = open(node.port)
    // A full keep-alive exchange proves the node has accepted (and counted) the connection.
    const answered = new Promise<void>((resolve) => connection.socket.once('data', () => { resolve() }))
    connection.socket.write('GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n')
    await answered
    held.push(connection)
  }
  const refused = envelopeOf(await exchange(node.port, 'GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n'))
  assert.equal(refused.status, 429)
  assertEnvelope(refused.body, 'rate_limit_error')
  assert.match(refused.body.error.message, /at most 4/)
  held[0].socket.destroy()
  await held[0].closed
  await waitFor(async () => (await fetch(`${node.url}/health`, { headers: { connection: 'close' } })).status === 200, { what: 'a freed slot' })
  for (const connection of held) connection.socket.destroy()
})

test('refusals made before routing are in the envelope: 431, 414, a malformed URL, bytes that are not HTTP', async (t) => {
  const { node } = await startTestNode(t)
  const cases: Array<[string, string, number, string]> = [
    ['headers over 16 KiB', `GET /v1/app?x=${'a'.repeat(20_000)} HTTP/1.1\r\nHost: localhost\r\n\r\n`, 431, 'request_too_large'],
    ['a path segment over 1024 characters', `GET /v1/app/agent/conversations/${'a'.repeat(2_000)} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n`, 414, 'request_too_large'],
    ['a malformed percent-encoding', 'GET /v1/app/agent/conversations/%E0%A4%A HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n', 400, 'invalid_request_error'],
    ['not HTTP', 'HELLO\r\n\r\n', 400, 'invalid_request_error']
  ]
  for (const [name, text, status, type] of cases) {
    const answer = envelopeOf(await exchange(node.port, text))
    assert.equal(answer.status, status, name)
    assertEnvelope(answer.body, type)
    assert.ok(!JSON.stringify(answer.body).includes('a'.repeat(100)), `${name}: the answer does not echo the input`)
  }
})

test('a known path with a method it lacks answers 405 with Allow, for every path of the API', async (t) => {
  const { api } = await startTestNode(t)
  const document = (await api.get('/openapi.json')).body as { paths: Record<string, Record<string, unknown>> }
  let checked = 0
  for (const [path, operations] of Object.entries(document.paths)) {
    const url = path.replace(/\{[^}]+\}/g, 'some-id')
    const has = Object.keys(operations).map((m) => m.toUpperCase())
    for (const method of ['GET', 'POST', 'PATCH', 'PUT', 'DELETE']) {
      if (has.includes(method)) continue
      const bodyless = method === 'GET' || method === 'DELETE'
      const res = await api.send(method, url, bodyless ? undefined : '{}', bodyless ? {} : { 'content-type': 'application/json' })
      assert.equal(res.status, 405, `${method} ${url}`)
      assertEnvelope(res.body, 'method_not_allowed')
      const allow = (res.headers.get('allow') ?? '').split(', ')
      for (const expected of has) assert.ok(allow.includes(expected), `${method} ${url}: Allow ${allow.join(',')} lacks ${expected}`)
      checked++
    }
  }
  assert.ok(checked > 50, `checked ${checked} pairs`)
  const unknown = await api.send('DELETE', '/v1/nothing-here', undefined)
  assert.equal(unknown.status, 404)
})

test('HEAD is GET without a body: HEAD /health needs no key; other HEADs need one like their GET', async (t) => {
  const { api, node } = await startTestNode(t)
  const { body: key } = await api.post('/v1/app/apikeys', { name: 'k' })
  await api.patch('/v1/app/settings', { allow_network_access: true })
  const health = await fetch(`${node.url}/health`, { method: 'HEAD' })
  assert.equal(health.status, 200)
  assert.equal(await health.text(), '')
  assert.equal((await fetch(`${node.url}/v1/app`, { method: 'HEAD' })).status, 401)
  const withKey = await fetch(`${node.url}/v1/app`, { method: 'HEAD', headers: { authorization: `Bearer ${key.key}` } })
  assert.equal(withKey.status, 200)
  assert.match(withKey.headers.get('content-type') ?? '', /json/)
  // A stream's HEAD says what the stream is and ends, rather than stay open with nothing to send
  const events = await fetch(`${node.url}/v1/app/events`, { method: 'HEAD', headers: { authorization: `Bearer ${key.key}` } })
  assert.equal(events.status, 200)
  assert.match(events.headers.get('content-type') ?? '', /^text\/event-stream/)
  assert.equal(await events.text(), '')
  assert.equal(node.http.openStreams.size, 0)
})

test('clients that leave mid-request are not errors: no error-level line, no stack', async (t) => {
  const lines: string[] = []
  const sink = new Writable({ write (chunk, _encoding, done) { lines.push(...String(chunk).split('\n').filter((l) => l !== '')); done() } })
  const node = await startNode(defaultConfig({ port: 0, dataDir: await tempDir(t), logLevel: 'debug', threads: 1 }), { logDestination: sink })
  t.after(() => node.close())
  for (let i = 0; i < 5; i++) {
    const { socket, closed } = open(node.port)
    // "100 Continue" says the node has the headers and has started on the request; then the client leaves mid-body.
    const started = new Promise<void>((resolve) => socket.once('data', () => { resolve() }))
    socket.write('POST /v1/app/apikeys HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 100\r\nExpect: 100-continue\r\n\r\n')
    await started
    socket.write('{"na')
    socket.destroy()
    await closed
    const events = await fetch(`${node.url}/v1/app/events`)
    const reader = events.body?.getReader()
    await reader?.read()
    await reader?.cancel()
  }
  const gone = (): number => lines.filter((l) => l.includes('"outcome":"client_closed_request"')).length
  await waitFor(() => gone() === 5 && node.http.openStreams.size === 0, { what: 'the node to see every client leave' })
  await node.close()
  const records = lines.map((line) => JSON.parse(line) as { level: number, msg: string, err?: { stack?: string } })
  const loud = records.filter((r) => r.level >= 50 || r.err?.stack != null)
  assert.deepEqual(loud, [], 'nothing logged as an error')
})
