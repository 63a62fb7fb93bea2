// One conversation asked of a node's OpenAI chat API turn by turn, as the conversation-affinity tests ask it (in-process
// nodes and `meshnode serve` processes alike): which peer served each turn and how much of its prompt was cached.
import assert from 'node:assert/strict'
import { waitFor, type Api } from './node.ts'

export const CONVERSATION_SYSTEM = 'You are a helpful model for the peer network. ' +
  'Think about each question, then answer it in a few good words. '.repeat(6) +
  'When you do not know, say so, and help the people who ask with what you know about the network and its nodes.'

/** The user's questions after the first turn's, in order. */
export const FOLLOW_UPS = ['what is a peer in the network?', 'and how does a node find one?', 'thanks, one more: what is a credit?']

export interface Message { role: 'system' | 'user' | 'assistant', content: string }
export interface Turn { servedBy: string | null, cached: number, prompt: number, reply: string }

/** The next turn of `messages`, asked of `api` (non-streaming, 8 tokens, greedy); it must be answered. */
export async function askTurn (api: Api, model: string, messages: Message[]): Promise<Turn> {
  const res = await api.post('/v1/chat/completions', { model, messages, max_tokens: 8, temperature: 0 })
  assert.equal(res.status, 200, JSON.stringify(res.body))
  return {
    servedBy: res.headers.get('x-served-by'),
    cached: res.body.usage.prompt_tokens_details?.cached_tokens ?? 0,
    prompt: res.body.usage.prompt_tokens,
    reply: res.body.choices[0].message.content
  }
}

export interface ServingPeer { api: Api, nodeID: string }

/**
 * Turn 1 of a new conversation, asked of `asker`, answered by one of `peers` (`chosen`) with nothing cached; then the
 * chosen peer raises its price until the asker ranks the other first, so that only affinity brings the later turns back.
 */
export async function firstTurnThenDearer<P extends ServingPeer> (asker: Api, model: string, peers: readonly [P, P], rankedWithinMs: number): Promise<{ messages: Message[], first: Turn, chosen: P, other: P }> {
  const messages: Message[] = [{ role: 'system', content: CONVERSATION_SYSTEM }, { role: 'user', content: 'hello there, how are you today?' }]
  const first = await askTurn(asker, model, messages)
  assert.equal(first.cached, 0, 'nothing of this conversation was evaluated anywhere before')
  const [chosen, other] = first.servedBy === `peer:${peers[0].nodeID}` ? peers : [peers[1], peers[0]]
  assert.equal(first.servedBy, `peer:${chosen.nodeID}`)
  const res = await chosen.api.patch('/v1/app/settings', { electricity_cost: 1000 })
  assert.equal(res.status, 200, JSON.stringify(res.body))
  await waitFor(async () => (await asker.get('/v1/models')).body.data[0]?.owned_by === `peer:${other.nodeID}`,
    { timeoutMs: rankedWithinMs, intervalMs: 250, what: 'the asker to rank the other peer first' })
  return { messages, first, chosen, other }
}
