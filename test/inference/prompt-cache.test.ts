import { test } from 'node:test'
import type { TestContext } from 'node:test'
import assert from 'node:assert/strict'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { LocalEngine, type ChatMessage, type ChatRequest, type LocalEngineOptions } from '../../src/inference/index.ts'
import { waitFor } from '../support/node.ts'
import { writeTinyGguf } from '../support/tiny-gguf.ts'
import { ask } from '../support/engine-ask.ts'

// A slot keeps what it evaluated; a request of the same requester evaluates only what its prompt does not share with
// it (usage.cachedTokens counts the rest), and nobody else's request ever reuses it.

async function startEngine (t: TestContext, options: LocalEngineOptions): Promise<LocalEngine> {
  const dir = await mkdtemp(join(tmpdir(), 'meshnode-cache-'))
  t.after(() => rm(dir, { recursive: true, force: true }))
  const { path } = await writeTinyGguf(join(dir, 'tiny.gguf'), { seed: 1, contextLength: 1024 })
  const engine = new LocalEngine({}, { threads: 1, contextSize: 1024, ...options })
  t.after(() => engine.close())
  await engine.load('tiny', path)
  return engine
}

const system: ChatMessage = { role: 'system', content: 'You are a helpful model.' }
const first: ChatMessage[] = [system, { role: 'user', content: 'hello there, how are you?' }]

await test('the next turn of a conversation evaluates only what its history adds, and answers as if it had read it all', async (t) => {
  const engine = await startEngine(t, { slots: 2 })
  const turn1 = await ask(engine, first, 'key:a')
  assert.equal(turn1.usage.cachedTokens, 0, 'nothing to reuse yet')
  const second = [...first, { role: 'assistant' as const, content: turn1.text }, { role: 'user' as const, content: 'and then what?' }]
  const turn2 = await ask(engine, second, 'key:a')
  // The slot holds turn 1's prompt and the answer tokens it evaluated; turn 2's prompt starts with all of turn 1's.
  // (How much of the answer also matches depends on how its text re-tokenizes.)
  assert.ok(turn2.usage.cachedTokens >= turn1.usage.promptTokens, `reused ${turn2.usage.cachedTokens} of turn 1's ${turn1.usage.promptTokens}`)
  assert.ok(turn2.usage.cachedTokens <= turn1.usage.promptTokens + turn1.usage.completionTokens - 1, 'no more than the slot held')
  assert.ok(turn2.usage.cachedTokens < turn2.usage.promptTokens)
  // The same prompt again: everything but the last token, which is evaluated for its logits.
  const again = await ask(engine, second, 'key:a')
  assert.equal(again.usage.cachedTokens, again.usage.promptTokens - 1)
  assert.equal(again.text, turn2.text)
  // Someone else asking the same evaluates it all, and gets the same answer.
  const fresh = await ask(engine, second, 'key:b')
  assert.equal(fresh.usage.cachedTokens, 0)
  assert.equal(fresh.text, turn2.text)
})

await test('the next turn reuses exactly the prefix it shares with what the slot holds', async (t) => {
  const engine = await startEngine(t, { slots: 1 })
  // One token answered: a sampled token is evaluated only when another follows it, so the slot holds exactly the
  // prompt, and the next turn (which starts with all of it) shares exactly that many tokens.
  const turn1 = await ask(engine, first, 'key:a', 1)
  const second: ChatMessage[] = [...first, { role: 'assistant', content: 'I am well, thank you.' }, { role: 'user', content: 'and then what?' }]
  const turn2 = await ask(engine, second, 'key:a', 1)
  assert.ok(turn2.usage.promptTokens > turn1.usage.promptTokens)
  assert.equal(turn2.usage.cachedTokens, turn1.usage.promptTokens)
  const third: ChatMessage[] = [...second, { role: 'assistant', content: 'Then the sun rose.' }, { role: 'user', content: 'why?' }]
  const turn3 = await ask(engine, third, 'key:a', 1)
  assert.equal(turn3.usage.cachedTokens, turn2.usage.promptTokens)
})

await test('a request never reuses another requester\'s cache: their slot is cleared first', async (t) => {
  const engine = await startEngine(t, { slots: 1 })
  await ask(engine, first, 'key:a')
  assert.equal((await ask(engine, first, 'key:a')).usage.cachedTokens > 0, true, 'the owner reuses its own')
  assert.equal((await ask(engine, first, 'key:b')).usage.cachedTokens, 0, 'another key, the same prompt: nothing reused')
  assert.equal((await ask(engine, first, 'peer:b')).usage.cachedTokens, 0)
  assert.equal((await ask(engine, first, 'key:a')).usage.cachedTokens, 0, 'the slot was cleared for the others')
  // A caller that names no requester is a requester of its own: it reuses nothing, not even its own last prompt.
  assert.equal((await ask(engine, first, undefined)).usage.cachedTokens, 0)
  assert.equal((await ask(engine, first, undefined)).usage.cachedTokens, 0)
})

await test('with free slots, each requester keeps its own: a request goes to the slot holding its conversation', async (t) => {
  const engine = await startEngine(t, { slots: 3 })
  const other: ChatMessage[] = [{ role: 'system', content: 'You answer in one word.' }, { role: 'user', content: 'name a colour' }]
  await ask(engine, first, 'key:a')
  await ask(engine, first, 'key:b') // an empty slot, not a's
  await ask(engine, other, 'key:a') // a second conversation of a's: the last empty slot, its first one stays whole
  const a1 = await ask(engine, first, 'key:a')
  const b1 = await ask(engine, first, 'key:b')
  const a2 = await ask(engine, other, 'key:a')
  assert.equal(a1.usage.cachedTokens, a1.usage.promptTokens - 1)
  assert.equal(b1.usage.cachedTokens, b1.usage.promptTokens - 1)
  assert.equal(a2.usage.cachedTokens, a2.usage.promptTokens - 1)
})

await test('a generation that was aborted or failed leaves its slot cleared: the next request reuses nothing', async (t) => {
  const engine = await startEngine(t, { slots: 1 })
  await ask(engine, first, 'key:a')
  const stop = new AbortController()
  const events = engine.generate({ messages: first, temperature: 0, maxTokens: 200 }, { requester: 'key:a', signal: stop.signal })
  await assert.rejects(async () => {
    for await (const event of events) if (event.type === 'delta') stop.abort(new Error('client left'))
  }, /client left/)
  assert.equal((await ask(engine, first, 'key:a')).usage.cachedTokens, 0)

  // A request refused before it ran (a bad parameter) touches no slot: the cache stays.
  assert.equal((await ask(engine, first, 'key:a')).usage.cachedTokens > 0, true)
  const bad: ChatRequest = { messages: first, temperature: 5 }
  await assert.rejects(async () => { for await (const event of engine.generate(bad, { requester: 'key:a' })) assert.fail(`unexpected ${event.type}`) }, /temperature/)
  assert.equal((await ask(engine, first, 'key:a')).usage.cachedTokens > 0, true)
})

await test('a request whose slot must be trimmed or cleared starts while other generations run, not after them', async (t) => {
  const engine = await startEngine(t, { slots: 4 })
  await ask(engine, first, 'key:a') // a's slot now holds tokens a different prompt must erase first
  // Three long generations on the other slots; node-llama-cpp's batch loop holds the context's lock while any decode
  // is queued, which an erasure needs (the erasures-take-the-lock patch, patches/node-llama-cpp.ts).
  let running = 3
  const long = ['key:b', 'key:c', 'key:d'].map(async (requester) => {
    await ask(engine, [{ role: 'user', content: `tell me everything, ${requester}` }], requester, 900)
    running--
  })
  await waitFor(() => engine.stats().busySlots === 3, { what: 'the three long generations to hold their slots' })
  const changed = await ask(engine, [system, { role: 'user', content: 'something else entirely' }], 'key:a', 2)
  assert.equal(running, 3, 'the short request finished while all three long ones still ran')
  assert.ok(changed.usage.cachedTokens > 0 && changed.usage.cachedTokens < changed.usage.promptTokens, 'it kept the shared start and trimmed the rest')
  await Promise.all(long)
})

