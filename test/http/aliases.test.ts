// Model aliases: a name a client insists on (Claude Code's claude-…, Codex's gpt-…) answered by a model this node
// serves, on every dialect, listed in /v1/models, kept across restarts; unknown names stay 404.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import Anthropic from '@anthropic-ai/sdk'
import { startChatNode, TINY_MODEL_ID } from '../support/chat-node.ts'
import { runCli } from '../support/cli.ts'

const hello = [{ role: 'user' as const, content: 'Hello' }]

test('an alias answers as its model on chat, Messages and Responses, is listed, and goes when removed', async (t) => {
  const { node, api, openai, dataDir } = await startChatNode(t)
  const made = await api.post('/v1/app/models/alias', { alias: 'claude-opus-5-5', modelID: TINY_MODEL_ID })
  assert.equal(made.status, 200, JSON.stringify(made.body))
  assert.deepEqual(made.body, { alias: 'claude-opus-5-5', modelID: TINY_MODEL_ID })
  // The CLI makes one too, and lists both
  const cli = ['--url', node.url, '--data-dir', dataDir]
  const byCli = await runCli(['models', 'alias', 'gpt-5.1-codex', TINY_MODEL_ID, ...cli])
  assert.equal(byCli.code, 0, byCli.stderr)
  assert.match(byCli.stdout, /Requests for gpt-5\.1-codex are answered by tiny-chat/)
  const listed = await runCli(['models', 'aliases', '--json', ...cli])
  assert.deepEqual(JSON.parse(listed.stdout), { aliases: [{ alias: 'claude-opus-5-5', modelID: TINY_MODEL_ID }, { alias: 'gpt-5.1-codex', modelID: TINY_MODEL_ID }] })

  const models = await openai.models.list()
  const ids = models.data.map((model) => [model.id, model.owned_by])
  assert.deepEqual(ids, [[TINY_MODEL_ID, 'local'], ['claude-opus-5-5', 'local'], ['gpt-5.1-codex', 'local']])
  assert.equal((await api.get('/v1/models/claude-opus-5-5')).status, 200)

  const chat = await openai.chat.completions.create({ model: 'Claude-Opus-5-5', messages: hello, max_tokens: 2 })
  assert.equal(chat.model, 'Claude-Opus-5-5', 'the answer names the model as asked')
  assert.equal(chat.usage?.completion_tokens, 2)
  const anthropic = new Anthropic({ baseURL: node.url, apiKey: 'unused', maxRetries: 0 })
  assert.equal((await anthropic.messages.create({ model: 'claude-opus-5-5', max_tokens: 2, messages: hello })).usage.output_tokens, 2)
  assert.ok((await anthropic.messages.countTokens({ model: 'claude-opus-5-5', messages: hello })).input_tokens > 0)
  assert.equal((await openai.responses.create({ model: 'gpt-5.1-codex', input: 'Hello', max_output_tokens: 2 })).usage?.output_tokens, 2)
  assert.equal((await api.post('/v1/tokenize', { model: 'gpt-5.1-codex', content: 'hello' })).status, 200)

  // Unknown names stay unknown
  assert.equal((await api.post('/v1/chat/completions', { model: 'gpt-4o', messages: hello, max_tokens: 2 })).status, 404)

  const refusals: Array<[Record<string, unknown>, number, RegExp]> = [
    [{ alias: 'x', modelID: 'not-here' }, 404, /not-here is not on this node/],
    [{ alias: 'smollm2-135m-instruct-q8_0', modelID: TINY_MODEL_ID }, 409, /model's own id/],
    [{ alias: TINY_MODEL_ID, modelID: TINY_MODEL_ID }, 409, /own id/],
    [{ alias: 'again', modelID: 'claude-opus-5-5' }, 409, /is itself an alias/],
    [{ alias: 'has space', modelID: TINY_MODEL_ID }, 400, /alias must be/],
    [{ alias: '', modelID: TINY_MODEL_ID }, 400, /alias/],
    [{ modelID: TINY_MODEL_ID }, 400, /alias/]
  ]
  for (const [body, status, message] of refusals) {
    const res = await api.post('/v1/app/models/alias', body)
    assert.equal(res.status, status, JSON.stringify(res.body))
    assert.match(res.body.error.message, message)
  }
  assert.equal((await api.get('/v1/app/models/aliases')).body.aliases.length, 2, 'nothing changed')

  // Kept across a restart
  const restarted = await node.close().then(async () => await (await import('../support/node.ts')).startTestNode(t, { dataDir }))
  assert.deepEqual((await restarted.api.get('/v1/app/models/aliases')).body.aliases.map((a: { alias: string }) => a.alias), ['claude-opus-5-5', 'gpt-5.1-codex'])

  const removed = await restarted.api.send('DELETE', '/v1/app/models/aliases/claude-opus-5-5', undefined)
  assert.equal(removed.status, 200)
  assert.equal((await restarted.api.send('DELETE', '/v1/app/models/aliases/claude-opus-5-5', undefined)).status, 404)
  assert.equal((await runCli(['models', 'unalias', 'gpt-5.1-codex', '--url', restarted.node.url, '--data-dir', dataDir])).code, 0)
  assert.deepEqual((await restarted.api.get('/v1/app/models/aliases')).body, { aliases: [] })
})
