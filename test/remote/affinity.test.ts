// Conversation affinity across peers: two peers serve the same model, a third node without it asks through its HTTP
// API. Each turn of a conversation goes back to the peer that answered the first (which reuses the evaluated prompt),
// even once the ranking prefers the other peer; once that peer stops, the next turn is answered by the other.
import assert from 'node:assert/strict'
import { join } from 'node:path'
import { test } from 'node:test'
import { startTestRelay, waitForPeers } from '../support/network.ts'
import { tempDir, type TestNode } from '../support/node.ts'
import { startPeer } from '../support/peers.ts'
import { askTurn, firstTurnThenDearer, FOLLOW_UPS, type Message, type Turn } from '../support/conversation.ts'
import { writeTinyGguf } from '../support/tiny-gguf.ts'

const MODEL = 'tiny-chat'

async function ask (asker: TestNode, messages: Message[]): Promise<Turn> {
  return await askTurn(asker.api, MODEL, messages)
}

test('a conversation stays with the peer that answered its first turn, and moves on when that peer stops', async (t) => {
  const relay = await startTestRelay(t)
  const { path } = await writeTinyGguf(join(await tempDir(t, 'meshnode-model-'), 'tiny.gguf'), { seed: 7, contextLength: 4096 })
  // One slot each, as an agent's model on a CPU is served: the asker's view of the peer's load may still count the last
  // turn's slot as busy when the next turn is asked, and must not turn the conversation away for it.
  const servers = { slots: 1, contextSize: 4096 }
  const asker = await startPeer(t, relay)
  const b = await startPeer(t, relay, { model: { id: MODEL, path }, settings: { electricity_cost: 0 }, config: servers })
  const c = await startPeer(t, relay, { model: { id: MODEL, path }, settings: { electricity_cost: 0 }, config: servers })
  const bothOnline = async (): Promise<void> => { await waitForPeers(asker, [b.nodeID, c.nodeID], { timeoutMs: 60_000 }) }
  await bothOnline()

  const { messages, first, chosen, other } = await firstTurnThenDearer(asker.api, MODEL, [b, c], 60_000)

  let last = first
  for (const question of FOLLOW_UPS) {
    messages.push({ role: 'assistant', content: last.reply }, { role: 'user', content: question })
    await bothOnline()
    last = await ask(asker, messages)
    assert.equal(last.servedBy, first.servedBy, `turn ${messages.length / 2} goes back to the peer that holds the conversation`)
    assert.ok(last.cached > 0 && last.cached < last.prompt, `turn ${messages.length / 2} reuses the evaluated prompt: ${last.cached} of ${last.prompt} tokens`)
  }

  // The peer stops: the next turn is answered by the other one, which then holds the conversation in turn.
  await chosen.node.network.stop()
  await chosen.node.close()
  messages.push({ role: 'assistant', content: last.reply }, { role: 'user', content: 'are you still there?' })
  const moved = await ask(asker, messages)
  assert.equal(moved.servedBy, `peer:${other.nodeID}`)
  messages.push({ role: 'assistant', content: moved.reply }, { role: 'user', content: 'good, go on please.' })
  await waitForPeers(asker, [other.nodeID], { timeoutMs: 60_000 })
  const after = await ask(asker, messages)
  assert.equal(after.servedBy, `peer:${other.nodeID}`)
  assert.ok(after.cached > 0, 'the other peer kept what it evaluated for the turn it took over')
})
