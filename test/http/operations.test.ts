import { test } from 'node:test'
import assert from 'node:assert/strict'
import { Agent, request } from 'node:http'
import { startTestNode, waitFor } from '../support/node.ts'
import { collectSse, startChatNode, TINY_MODEL_ID } from '../support/chat-node.ts'

test('keep_awake holds a sleep inhibitor while on, or the snapshot says why it cannot', async (t) => {
  const { api } = await startTestNode(t)
  assert.deepEqual((await api.get('/v1/app')).body.keepAwake, { active: false, method: null, reason: null })
  await api.patch('/v1/app/settings', { keep_awake: true })
  const status = await waitFor(async () => {
    const keepAwake = (await api.get('/v1/app')).body.keepAwake as { active: boolean, method: string | null, reason: string | null }
    return keepAwake.active || keepAwake.reason != null ? keepAwake : undefined
  }, { what: 'the inhibitor to start or fail' })
  if (status.active) {
    assert.equal(status.method, process.platform === 'darwin' ? 'caffeinate' : 'systemd-inhibit')
  } else {
    // e.g. a container without systemd's bus: the node says so instead of pretending
    t.diagnostic(`no sleep inhibitor here: ${status.reason ?? ''}`)
    assert.match(status.reason ?? '', /systemd-inhibit|caffeinate|no sleep inhibitor/)
  }
  await api.patch('/v1/app/settings', { keep_awake: false })
  assert.deepEqual((await api.get('/v1/app')).body.keepAwake, { active: false, method: null, reason: null })
})

test('closing the node (what SIGTERM does) finishes the request in flight, then closes the database', async (t) => {
  // A grace period no busy machine can outlast: this test is about finishing, the next one about the cut
  const { node, openai } = await startChatNode(t, { shutdownGraceMs: 600_000 })
  const stream = await openai.chat.completions.create({
    model: TINY_MODEL_ID, messages: [{ role: 'user', content: 'go' }], max_tokens: 300, temperature: 0, stream: true, stream_options: { include_usage: true }
  })
  let closing: Promise<void> | undefined
  let usage: { completion_tokens: number } | null | undefined
  for await (const chunk of stream) {
    if (closing == null && (chunk.choices[0]?.delta.content ?? '') !== '') {
      // The first token is here and 299 are still to come: the node is asked to close in the middle of the answer
      assert.equal(node.engine.stats().busySlots, 1, 'the request is in flight when the node is closed')
      closing = node.close()
    }
    usage = chunk.usage ?? usage
  }
  assert.ok(closing != null, 'the answer had a token')
  assert.equal(usage?.completion_tokens, 300, 'the request in flight ran to its end')
  await closing
  assert.throws(() => node.db.prepare('SELECT 1').get(), /not open/)
})

test('a client that keeps its connection alive does not hold the close once its request is answered', async (t) => {
  // This client never hangs up and the node would keep an idle connection for 10 minutes: the close ends the
  // connection as soon as the request in flight is answered, or this test outlasts the suite's limit.
  const { node } = await startChatNode(t, { shutdownGraceMs: 600_000, http: { keepAliveTimeoutMs: 600_000 } })
  const agent = new Agent({ keepAlive: true })
  t.after(() => { agent.destroy() })
  const answer = await new Promise<{ status: number | undefined, body: string, closing: Promise<void> | undefined }>((resolve, reject) => {
    const req = request(`${node.url}/v1/chat/completions`, { method: 'POST', agent, headers: { 'content-type': 'application/json' } }, (res) => {
      let body = ''
      let closing: Promise<void> | undefined
      res.setEncoding('utf8')
      res.on('data', (chunk: string) => {
        body += chunk
        if (closing == null && body.includes('"content"')) closing = node.close() // the answer has begun: close the node
      })
      res.on('end', () => { resolve({ status: res.statusCode, body, closing }) })
      res.on('error', reject)
    })
    req.on('error', reject)
    req.end(JSON.stringify({ model: TINY_MODEL_ID, messages: [{ role: 'user', content: 'go' }], max_tokens: 300, temperature: 0, stream: true }))
  })
  assert.equal(answer.status, 200)
  assert.match(answer.body, /data: \[DONE\]/, 'the answer in flight was finished')
  assert.ok(answer.closing != null, 'the node was closed during the answer')
  await answer.closing
  assert.throws(() => node.db.prepare('SELECT 1').get(), /not open/)
})

test('closing the node cuts a request still running after the grace period, refuses new ones, and still closes the database', async (t) => {
  // Greedy with a long context: the tiny model would generate for minutes, far past the grace period
  const { node } = await startChatNode(t, { contextSize: 32_768, shutdownGraceMs: 300 }, { contextLength: 32_768 })
  const response = await fetch(`${node.url}/v1/chat/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: TINY_MODEL_ID, messages: [{ role: 'user', content: 'go' }], max_tokens: 100_000, temperature: 0, stream: true })
  })
  assert.equal(response.status, 200)
  const reading = collectSse(response).then(({ data }) => ({ data, error: null as unknown }), (error: unknown) => ({ data: [] as string[], error }))
  await waitFor(() => node.engine.stats().busySlots === 1, { what: 'generation to start' })

  const closing = node.close()
  // During the grace period the node takes no new request (a new connection is refused, a kept-alive one gets 503)
  const late = await fetch(`${node.url}/health`).then((r) => r.status, (err: unknown) => (err as Error).name)
  assert.ok(late === 503 || late === 'TypeError', `a request during shutdown got ${String(late)}`)

  await closing
  const cut = await reading
  assert.ok(cut.error != null || !cut.data.includes('[DONE]'), 'the stream was cut, not finished')
  assert.equal(node.engine.stats().busySlots, 0, 'the generation stopped')
  assert.throws(() => node.db.prepare('SELECT 1').get(), /not open/)
  await assert.rejects(fetch(`${node.url}/health`), 'the port is closed')
})
