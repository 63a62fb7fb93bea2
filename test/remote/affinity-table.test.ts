// The conversation affinity table on its own: which prefix hashes a request has, what an answer records, and the
// bounds (size, age on an injected clock, requesters kept apart).
import assert from 'node:assert/strict'
import { test } from 'node:test'
import type { ChatMessage, RoutedRequest } from '../../src/inference/index.ts'
import { AFFINITY_MAX_AGE_MS, COMPLETION_AFFINITY_CHUNK_CHARS, ConversationAffinity, conversationKeys, type ConversationKeys } from '../../src/remote/affinity.ts'

const MODEL = 'tiny-chat'
const anyPeer = (): boolean => true

function chat (messages: ChatMessage[]): RoutedRequest {
  return { kind: 'chat', modelID: MODEL, messages }
}

function keysOf (requester: string, request: RoutedRequest): ConversationKeys {
  const keys = conversationKeys(requester, request)
  assert.ok(keys != null)
  return keys
}

/** A conversation's turn n: the system prompt, then n user messages, each but the last answered. */
function turn (n: number, tag = ''): RoutedRequest {
  const messages: ChatMessage[] = [{ role: 'system', content: 'You are a helpful model.' }]
  for (let i = 1; i <= n; i++) {
    messages.push({ role: 'user', content: `question ${i}${tag}` })
    if (i < n) messages.push({ role: 'assistant', content: `answer ${i}` })
  }
  return chat(messages)
}

test('a turn finds the peer that answered the turn before it, through the previous turn\'s whole prompt', () => {
  const affinity = new ConversationAffinity()
  affinity.answered(keysOf('local', turn(1)), 'peer-a')
  assert.equal(affinity.peerFor(keysOf('local', turn(2)), anyPeer), 'peer-a')
  assert.equal(affinity.peerFor(keysOf('local', turn(3)), anyPeer), 'peer-a', 'an older turn still matches while nothing longer does')
  affinity.answered(keysOf('local', turn(2)), 'peer-b')
  assert.equal(affinity.peerFor(keysOf('local', turn(3)), anyPeer), 'peer-b', 'the longest answered prefix wins')
  assert.equal(affinity.peerFor(keysOf('local', turn(3)), (nodeID) => nodeID !== 'peer-b'), 'peer-a', 'a peer not usable now is passed over for a shorter prefix')
  assert.equal(affinity.peerFor(keysOf('local', turn(2, ' (edited)')), anyPeer), null, 'a different conversation with the same system prompt')
})

test('another requester never gets an entry: the same conversation under another requester misses', () => {
  const affinity = new ConversationAffinity()
  affinity.answered(keysOf('key:alice', turn(1)), 'peer-a')
  assert.equal(affinity.peerFor(keysOf('key:bob', turn(2)), anyPeer), null)
  assert.equal(affinity.peerFor(keysOf('local', turn(2)), anyPeer), null)
  assert.equal(affinity.peerFor(keysOf('key:alice', turn(2)), anyPeer), 'peer-a')
})

test('the model, the tools and each message\'s parts are in the hash; a thought is not', () => {
  const base = turn(2)
  const keys = keysOf('local', base)
  assert.equal(keys.lookup.length, 4, 'one hash per message')
  assert.equal(keys.whole, keys.lookup[0], 'the whole prompt is the longest prefix')
  assert.equal(new Set(keys.lookup).size, 4)
  assert.notEqual(keysOf('local', { ...base, modelID: 'other-model' }).whole, keys.whole)
  assert.notEqual(keysOf('local', { ...base, tools: [{ name: 'get_weather' }] } as RoutedRequest).whole, keys.whole)
  assert.equal(keysOf('local', { ...base, temperature: 0, maxTokens: 9 } as RoutedRequest).whole, keys.whole, 'sampling is not part of the prompt')
  if (base.kind !== 'chat') throw new Error('a chat')
  const withThought = base.messages.map((message) => message.role === 'assistant' ? { ...message, reasoning: 'hmm' } : message)
  assert.equal(keysOf('local', chat(withThought)).whole, keys.whole)
  const withCall = base.messages.map((message) => message.role === 'assistant' ? { ...message, toolCalls: [{ id: 'c1', name: 'f', arguments: '{}' }] } : message)
  assert.notEqual(keysOf('local', chat(withCall)).whole, keys.whole)
  // Message boundaries are unambiguous: the same text split differently between messages is another prompt.
  assert.notEqual(keysOf('local', chat([{ role: 'user', content: 'ab' }, { role: 'user', content: 'c' }])).whole,
    keysOf('local', chat([{ role: 'user', content: 'a' }, { role: 'user', content: 'bc' }])).whole)
})

test('completions: hashed at whole chunks of the prompt, so a longer prompt that extends an answered one finds its peer', () => {
  const affinity = new ConversationAffinity()
  const first = 'x'.repeat(COMPLETION_AFFINITY_CHUNK_CHARS * 2 + 10)
  const completion = (prompt: string, suffix?: string): RoutedRequest => ({ kind: 'completion', modelID: MODEL, prompt, suffix })
  assert.equal(conversationKeys('local', completion('x'.repeat(COMPLETION_AFFINITY_CHUNK_CHARS - 1))), null, 'shorter than a chunk: none')
  assert.equal(conversationKeys('local', completion(first, 'tail')), null, 'fill-in-the-middle: none')
  assert.equal(conversationKeys('local', { kind: 'embeddings', modelID: MODEL, input: [first] }), null, 'embeddings: none')
  affinity.answered(keysOf('local', completion(first)), 'peer-a')
  assert.equal(affinity.peerFor(keysOf('local', completion(`${first} and a generated answer, then more of the user's text`)), anyPeer), 'peer-a')
  assert.equal(affinity.peerFor(keysOf('key:other', completion(`${first} and more`)), anyPeer), null)
  assert.equal(affinity.peerFor(keysOf('local', completion(`y${first}`)), anyPeer), null, 'another start')
})

test('bounded: past maxEntries the least recently used entry is forgotten', () => {
  const affinity = new ConversationAffinity({ maxEntries: 3 })
  const conversations = [1, 2, 3, 4].map((n) => chat([{ role: 'user', content: `conversation ${n}` }]))
  for (const [i, request] of conversations.slice(0, 3).entries()) affinity.answered(keysOf('local', request), `peer-${i + 1}`)
  // Using the first one makes the second the least recently used.
  assert.equal(affinity.peerFor(keysOf('local', conversations[0]), anyPeer), 'peer-1')
  affinity.answered(keysOf('local', conversations[3]), 'peer-4')
  assert.equal(affinity.size, 3)
  assert.equal(affinity.peerFor(keysOf('local', conversations[1]), anyPeer), null, 'the least recently used went')
  assert.equal(affinity.peerFor(keysOf('local', conversations[0]), anyPeer), 'peer-1')
  assert.equal(affinity.peerFor(keysOf('local', conversations[2]), anyPeer), 'peer-3')
  assert.equal(affinity.peerFor(keysOf('local', conversations[3]), anyPeer), 'peer-4')
})

test('an entry older than the age limit is not used, and is dropped; a new answer renews it', () => {
  let now = 1_000_000
  const affinity = new ConversationAffinity({ now: () => now })
  affinity.answered(keysOf('local', turn(1)), 'peer-a')
  now += AFFINITY_MAX_AGE_MS
  assert.equal(affinity.peerFor(keysOf('local', turn(2)), anyPeer), 'peer-a', 'at the limit it still counts')
  now += 1
  assert.equal(affinity.peerFor(keysOf('local', turn(2)), anyPeer), null)
  assert.equal(affinity.size, 0)
  affinity.answered(keysOf('local', turn(1)), 'peer-b')
  now += AFFINITY_MAX_AGE_MS - 1
  assert.equal(affinity.peerFor(keysOf('local', turn(2)), anyPeer), 'peer-b')
})
