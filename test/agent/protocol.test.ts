// The agent protocol's answering side facing forged and broken messages, on in-memory stream pairs: the responder is
// built from real parts (conversations on a temp database, the serving policy over a real engine). A message that is
// forged, oversized, misaddressed or misshapen is a ProtocolError the network bans for, and nothing is filed. The
// full-node cases (an honest exchange, a retry, an injection, a ban that holds) are in hostile.test.ts.
import assert from 'node:assert/strict'
import { randomUUID } from 'node:crypto'
import { join } from 'node:path'
import { test, type TestContext } from 'node:test'
import { streamPair } from '@libp2p/utils'
import { pino } from 'pino'
import { AGENT_PROTOCOL, AgentReplyFrame, signAgentMessage, type AgentMessage } from '../../src/agent/index.ts'
import { AgentResponder } from '../../src/agent/agent-responder.ts'
import { Conversations } from '../../src/agent/conversations.ts'
import { generateSeed, identityFromSeed, type NodeIdentity } from '../../src/identity/index.ts'
import { LocalEngine } from '../../src/inference/index.ts'
import { sameModel } from '../../src/models/index.ts'
import { ServingPolicy } from '../../src/serving/index.ts'
import { SettingsStore } from '../../src/settings/index.ts'
import { openDatabase } from '../../src/store/index.ts'
import { isHostile, openFrames, readMessage, signEnvelope, writeMessage } from '../../src/wire/index.ts'
import { tempDir } from '../support/node.ts'

const log = pino({ level: 'silent' })
const node = identityFromSeed(generateSeed())
const raw = identityFromSeed(generateSeed())
const other = identityFromSeed(generateSeed())

async function responder (t: TestContext): Promise<{ responder: AgentResponder, conversations: Conversations }> {
  const db = openDatabase(join(await tempDir(t), 'meshnode.db'))
  t.after(() => { db.close() })
  const engine = new LocalEngine({}, { threads: 1 })   // no model: nothing here reaches a generation but the last case
  t.after(() => engine.close())
  const serving = new ServingPolicy({ engine, sameModel, settings: new SettingsStore({ db }), ptn: { memberPtnIDs: () => [] }, peers: { peer: () => null }, recordDemand: () => undefined, log })
  const conversations = new Conversations({ db })
  const agent = new AgentResponder({ identity: node, conversations, serving, profile: () => ({ name: 'node', systemPrompt: '' }), log },
    { maxAnswerTokens: 8, maxHistoryMessages: 8, keepaliveMs: 5_000 })
  return { responder: agent, conversations }
}

function message (from: NodeIdentity, extra: Partial<AgentMessage> = {}): AgentMessage {
  return { conversationID: randomUUID(), messageID: randomUUID(), inReplyTo: null, from: from.nodeID, fromName: 'raw peer', to: node.nodeID, content: 'Hello agent', sentAt: new Date().toISOString(), ...extra }
}

/** Sends one frame from `raw` and returns what the responder threw (null when it answered) and the answer, if any. */
async function exchange (agent: AgentResponder, frame: unknown): Promise<{ thrown: unknown, reply: AgentReplyFrame | null }> {
  const [asker, server] = await streamPair({ protocol: AGENT_PROTOCOL })
  const handled = agent.handle(server, { nodeID: raw.nodeID }).then(() => null, (err: unknown) => {
    server.abort(err instanceof Error ? err : new Error(String(err)))
    return err
  })
  const frames = openFrames(asker, { maxFrameBytes: 1024 * 1024 })
  await writeMessage(frames, frame)
  await asker.close()
  const reply = await readMessage(frames, AgentReplyFrame, { timeoutMs: 10_000 }).catch(() => null)
  return { thrown: await handled, reply }
}

test('forged, oversized, misaddressed or misshapen agent messages are ProtocolErrors the network bans for; nothing is filed', async (t) => {
  const { responder: agent, conversations } = await responder(t)
  const forgeries: Array<[string, unknown]> = [
    ['signed by another node, in its name', signAgentMessage(other, message(other))],
    ['in another node\'s name, signed by the sender', signEnvelope(raw, message(other), { domain: AGENT_PROTOCOL })],
    ['addressed to another node', signAgentMessage(raw, { ...message(raw), to: other.nodeID })],
    ['content over 32 KiB', signEnvelope(raw, { ...message(raw), content: 'x'.repeat(32 * 1024 + 1) }, { domain: AGENT_PROTOCOL })],
    ['content altered after signing', (() => {
      const signed = signAgentMessage(raw, message(raw))
      return { ...signed, body: { ...signed.body, content: 'Altered' } }
    })()],
    ['signed for another protocol', signEnvelope(raw, message(raw), { domain: '/meshnode/transfer/1.0.0' })],
    ['an answer where a question belongs', signAgentMessage(raw, message(raw, { inReplyTo: randomUUID() }))],
    ['an extra field', signEnvelope(raw, { ...message(raw), bonus: 1 }, { domain: AGENT_PROTOCOL })],
    ['not an envelope', message(raw)]
  ]
  for (const [what, frame] of forgeries) {
    const { thrown, reply } = await exchange(agent, frame)
    assert.ok(isHostile(thrown), `${what}: ${String(thrown)}`)
    assert.equal(reply, null, `${what}: no answer, a reset`)
  }
  assert.deepEqual(conversations.list(), [], 'nothing filed')
})

test('an honest message to an agent with no model gets an error frame, not a reset; nothing is filed', async (t) => {
  const { responder: agent, conversations } = await responder(t)
  const { thrown, reply } = await exchange(agent, signAgentMessage(raw, message(raw)))
  assert.equal(thrown, null)
  assert.equal(reply?.type, 'error')
  assert.equal(reply?.type === 'error' ? reply.code : null, 'no_model')
  assert.deepEqual(conversations.list(), [])
})
