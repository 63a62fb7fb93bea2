// Conversation affinity across peers, every node a `meshnode serve` process started with its defaults (only its data
// dir and port given) and put on a relay process through its settings, as a user runs it: two of them serve the same
// model, imported and loaded through their API, and a third without it asks. Each turn of a conversation goes back to
// the peer that answered the first (which reuses the evaluated prompt), even once the ranking prefers the other peer;
// once that peer's process stops, the next turn is answered by the other, which then holds the conversation.
import assert from 'node:assert/strict'
import { join } from 'node:path'
import { test, type TestContext } from 'node:test'
import { Api, exitOf, spawnNodeProcess, tempDir, waitFor, type NodeProcess } from '../support/node.ts'
import { startRelayProcess } from '../support/relay-process.ts'
import { askTurn, firstTurnThenDearer, FOLLOW_UPS, type Message, type Turn } from '../support/conversation.ts'
import { writeTinyGguf } from '../support/tiny-gguf.ts'

const MODEL = 'tiny-chat'
interface Serve { api: Api, nodeID: string, node: NodeProcess }

/** `meshnode serve` on its defaults, with `modelPath` imported and loaded when given, then put on `relayUrl`'s WAN. */
async function startServe (t: TestContext, relayUrl: string, modelPath?: string): Promise<Serve> {
  const node = await spawnNodeProcess(t, ['--data-dir', await tempDir(t)])
  const api = new Api(node.url)
  if (modelPath != null) {
    const imported = await api.post('/v1/app/models/import', { path: modelPath, modelID: MODEL })
    assert.equal(imported.status, 200, JSON.stringify(imported.body))
    const loaded = await api.post('/v1/app/models/load', { modelID: MODEL })
    assert.equal(loaded.status, 200, JSON.stringify(loaded.body))
  }
  const res = await api.patch('/v1/app/settings', { wan_enabled: true, wan_relay_url: relayUrl })
  assert.equal(res.status, 200, JSON.stringify(res.body))
  return { api, nodeID: (await api.get('/v1/app')).body.node.nodeID, node }
}

/** The asker lists every one of `servers` online in `GET /v1/app/peers`, serving the model. */
async function waitForServers (asker: Serve, servers: Serve[]): Promise<void> {
  await waitFor(async () => {
    const peers = (await asker.api.get('/v1/app/peers')).body.peers as Array<{ nodeID: string, status: string, model: string | null }>
    return servers.every(server => peers.some(peer => peer.nodeID === server.nodeID && peer.status === 'online' && peer.model === MODEL))
  }, { timeoutMs: 120_000, intervalMs: 250, what: `the asker to list ${servers.map(server => server.nodeID.slice(0, 8)).join(', ')} serving ${MODEL}` })
}

async function ask (asker: Serve, messages: Message[]): Promise<Turn> {
  return await askTurn(asker.api, MODEL, messages)
}

test('`meshnode serve` on defaults: a conversation stays with the peer that answered its first turn, and moves on when that peer stops', { timeout: 480_000 }, async (t) => {
  const relay = await startRelayProcess(t, join(await tempDir(t), 'relay'))
  const { path } = await writeTinyGguf(join(await tempDir(t, 'meshnode-model-'), 'tiny.gguf'), { seed: 7, contextLength: 4096 })
  const [asker, b, c] = await Promise.all([startServe(t, relay.url), startServe(t, relay.url, path), startServe(t, relay.url, path)])
  await waitForServers(asker, [b, c])

  // The chosen peer turns dearer. Latency (in 20 ms steps) ranks before price, and on defaults it is measured again only
  // every 30 s: on a loaded machine a ping may put the two peers in different steps for a few rounds, hence the long wait.
  const { messages, first, chosen, other } = await firstTurnThenDearer(asker.api, MODEL, [b, c], 240_000)

  let last = first
  for (const question of FOLLOW_UPS) {
    messages.push({ role: 'assistant', content: last.reply }, { role: 'user', content: question })
    await waitForServers(asker, [b, c])
    last = await ask(asker, messages)
    assert.equal(last.servedBy, first.servedBy, `turn ${messages.length / 2} goes back to the peer that holds the conversation`)
    assert.ok(last.cached > 0 && last.cached < last.prompt, `turn ${messages.length / 2} reuses the evaluated prompt: ${last.cached} of ${last.prompt} tokens`)
  }

  // The peer's process stops: the next turn is answered by the other one, which then holds the conversation in turn.
  chosen.node.child.kill('SIGTERM')
  assert.equal((await exitOf(chosen.node.child)).code, 0)
  messages.push({ role: 'assistant', content: last.reply }, { role: 'user', content: 'are you still there?' })
  const moved = await ask(asker, messages)
  assert.equal(moved.servedBy, `peer:${other.nodeID}`)
  messages.push({ role: 'assistant', content: moved.reply }, { role: 'user', content: 'good, go on please.' })
  await waitForServers(asker, [other])
  const after = await ask(asker, messages)
  assert.equal(after.servedBy, `peer:${other.nodeID}`)
  assert.ok(after.cached > 0, 'the other peer kept what it evaluated for the turn it took over')
})
