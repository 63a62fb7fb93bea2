import { test } from 'node:test'
import assert from 'node:assert/strict'
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
  const { node, openai } = await startChatNode(t, { contextSize: 8192, shutdownGraceMs: 600_000 }, { contextLength: 8192 })
  const inFlight = openai.chat.completions.create({ model: TINY_MODEL_ID, messages: [{ role: 'user', content: 'go' }], max_tokens: 1500, temperature: 0 })
  await waitFor(() => node.engine.stats().busySlots === 1, { what: 'generation to start' })
  const closing = node.close()
  const answer = await inFlight
  assert.equal(answer.usage?.completion_tokens, 1500, 'the request in flight ran to its end')
  await closing
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
