import { test } from 'node:test'
import assert from 'node:assert/strict'
import { startTestNode, waitFor } from '../support/node.ts'
import { startChatNode, TINY_MODEL_ID } from '../support/chat-node.ts'

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
  const { node, openai } = await startChatNode(t, { contextSize: 8192 }, { contextLength: 8192 })
  const inFlight = openai.chat.completions.create({ model: TINY_MODEL_ID, messages: [{ role: 'user', content: 'go' }], max_tokens: 1500, temperature: 0 })
  await waitFor(() => node.engine.stats().busySlots === 1, { what: 'generation to start' })
  const closing = node.close()
  const answer = await inFlight
  assert.equal(answer.usage?.completion_tokens, 1500, 'the request in flight ran to its end')
  await closing
  assert.throws(() => node.db.prepare('SELECT 1').get(), /not open/)
})
