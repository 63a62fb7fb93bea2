// Codex's own request, as recorded (test/fixtures/codex-0.171.0-responses.json: a long developer prompt in several
// developer and user messages with ids, function tools, a `namespace` of sub-agent tools, `web_search`, reasoning
// summary, include, store false, prompt_cache_key, client_metadata), replayed whole against a real node: answered,
// not refused, streamed as Codex reads it, with the tool kinds that cannot run here named.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { readFile } from 'node:fs/promises'
import { join } from 'node:path'
import { collectSse, startChatNode, TINY_MODEL_ID } from '../support/chat-node.ts'

interface Recorded { method: string, url: string, body: Record<string, unknown> & { tools: Array<{ type: string, name?: string }> } }

test('Codex\'s request, as recorded, is answered whole, non-streamed and streamed, its other tool kinds named', async (t) => {
  const recorded = JSON.parse(await readFile(join(import.meta.dirname, '..', 'fixtures', 'codex-0.171.0-responses.json'), 'utf8')) as Recorded
  assert.equal(recorded.method, 'POST')
  assert.equal(recorded.url, '/v1/responses')
  assert.equal(recorded.body.stream, true)
  // Codex's prompt takes ~10k tokens; the tiny model's answer ends only by a limit, so it gets one: Codex sends none
  const { api } = await startChatNode(t, { contextSize: 65_536 }, { contextLength: 65_536 })
  const body = { ...recorded.body, model: TINY_MODEL_ID, max_output_tokens: 16 }
  const ignored = recorded.body.tools.filter((tool) => tool.type !== 'function').map((tool) => tool.name == null ? tool.type : `${tool.type}:${tool.name}`)
  assert.deepEqual(ignored, ['namespace:multi_agent_v1', 'web_search'])

  await t.test('non-streamed: 200 with the response, nothing kept (store false)', async () => {
    const res = await api.post('/v1/responses', { ...body, stream: false })
    assert.equal(res.status, 200, JSON.stringify(res.body))
    assert.equal(res.headers.get('x-meshnode-ignored-tools'), ignored.join(', '))
    assert.ok(['completed', 'incomplete'].includes(res.body.status), res.body.status)
    assert.equal(res.body.error, null)
    assert.equal(res.body.store, false)
    assert.equal(res.body.tools.length, recorded.body.tools.length, 'the response repeats every tool, of every kind')
    assert.ok(res.body.usage.input_tokens > 5_000, `Codex's whole prompt was read: ${res.body.usage.input_tokens} tokens`)
    assert.ok(res.body.usage.output_tokens > 0)
    assert.equal((await api.get(`/v1/responses/${res.body.id}`)).status, 404)
  })

  await t.test('streamed, as Codex sends it: the events open with response.created and end completed or incomplete', async () => {
    const res = await fetch(`${api.url}/v1/responses`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'text/event-stream', authorization: 'Bearer sk-unused', originator: 'codex_exec' },
      body: JSON.stringify(body)
    })
    assert.equal(res.status, 200, await res.clone().text())
    assert.match(res.headers.get('content-type') ?? '', /^text\/event-stream/)
    assert.equal(res.headers.get('x-meshnode-ignored-tools'), ignored.join(', '))
    const events = (await collectSse(res)).data.map((data) => JSON.parse(data) as { type: string, sequence_number: number, response?: { status: string, error: unknown } })
    const types = events.map((event) => event.type)
    assert.deepEqual(types.slice(0, 2), ['response.created', 'response.in_progress'])
    assert.ok(!types.includes('response.failed'), types.join(' '))
    const last = events.at(-1)
    assert.ok(last?.type === 'response.completed' || last?.type === 'response.incomplete', types.join(' '))
    assert.equal(last.response?.error, null)
    assert.deepEqual(events.map((event) => event.sequence_number), events.map((_, i) => i))
  })
})
