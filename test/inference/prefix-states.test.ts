// A slot's long prefix outlives the slot: saved to disk before its model is unloaded, the engine closes or the slot is
// cleared for another requester, and restored for the same requester on the same model file, so only the rest of the
// prompt is evaluated. A state that fails its checks is removed and never loaded; the disk budget evicts the least
// recently used; a changed or deleted model file takes its states with it.
import { test } from 'node:test'
import type { TestContext } from 'node:test'
import assert from 'node:assert/strict'
import { copyFile, mkdtemp, readdir, readFile, rm, truncate, utimes, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { keyedRequester, LocalEngine, MAX_PREFIX_STATES_PER_REQUESTER, type ChatMessage, type InferenceLogger, type LocalEngineOptions } from '../../src/inference/index.ts'
import { waitFor } from '../support/node.ts'
import { writeTinyGguf } from '../support/tiny-gguf.ts'
import { ask } from '../support/engine-ask.ts'

/** Low enough that the test prompts (well over a hundred tokens) are kept, high enough that the short one is not. */
const MIN_TOKENS = 64

const system: ChatMessage = {
  role: 'system',
  content: Array.from({ length: 10 }, (_, i) => `rule ${i + 1}: the model will help people find water and answer each question with a good long answer`).join('. ')
}
const turn: ChatMessage[] = [system, { role: 'user', content: 'hello there, how are you?' }]
const otherTurn: ChatMessage[] = [{ role: 'system', content: system.content.replaceAll('water', 'oil') }, { role: 'user', content: 'name a colour' }]
const followUp = (answer: string): ChatMessage[] => [...turn, { role: 'assistant', content: answer }, { role: 'user', content: 'and then what?' }]

interface Setup { dir: string, model: string, states: string }

/** Engines a test opened: closed (saving what their slots hold) before its directory is removed. */
const engines = new WeakMap<TestContext, LocalEngine[]>()
/** What the engines warned of, newest last. */
const warnings: string[] = []
const log: InferenceLogger = { debug: () => undefined, info: () => undefined, warn: (_obj, msg) => { warnings.push(msg ?? '') }, error: () => undefined }

async function setup (t: TestContext): Promise<Setup> {
  const dir = await mkdtemp(join(tmpdir(), 'meshnode-prefix-'))
  warnings.length = 0
  const opened: LocalEngine[] = []
  engines.set(t, opened)
  t.after(async () => {
    for (const engine of opened) await engine.close()
    await rm(dir, { recursive: true, force: true })
  })
  const { path } = await writeTinyGguf(join(dir, 'tiny.gguf'), { seed: 1, contextLength: 4096 })
  return { dir, model: path, states: join(dir, 'prefix-states') }
}

/** An engine saving its prefixes in `states` (none when null), with the model loaded. */
async function engineOn (t: TestContext, model: string, states: string | null, options: LocalEngineOptions = {}): Promise<LocalEngine> {
  const engine = new LocalEngine({ log }, { threads: 1, slots: 2, ...(states == null ? {} : { prefixStateDir: states, prefixStateMinTokens: MIN_TOKENS }), ...options })
  engines.get(t)?.push(engine)
  await engine.load('tiny', model)
  return engine
}

/** The answer an engine that never saw the prompt gives. */
async function coldAnswer (t: TestContext, model: string, messages: ChatMessage[]): Promise<string> {
  const engine = await engineOn(t, model, null)
  const { text, usage } = await ask(engine, messages, 'key:cold')
  assert.equal(usage.cachedTokens, 0)
  await engine.close()
  return text
}

async function stateFiles (states: string): Promise<string[]> {
  return (await readdir(states)).filter((name) => name.endsWith('.state')).sort()
}

await test('after an unload and a load, the prefix comes back from disk: only the rest is evaluated, and the answer is a cold engine\'s', async (t) => {
  const { model, states } = await setup(t)
  const engine = await engineOn(t, model, states)
  const first = await ask(engine, turn, 'key:a')
  assert.ok(first.usage.promptTokens >= MIN_TOKENS, `the prompt holds ${first.usage.promptTokens} tokens`)
  await engine.unload('tiny')
  assert.equal((await stateFiles(states)).length, 1, 'the slot was saved as its model left')
  await engine.load('tiny', model)
  const second = await ask(engine, followUp(first.text), 'key:a')
  assert.ok(second.usage.cachedTokens >= first.usage.promptTokens, `reused ${second.usage.cachedTokens} of the first prompt's ${first.usage.promptTokens}`)
  assert.ok(second.usage.cachedTokens < second.usage.promptTokens)
  assert.equal(second.text, await coldAnswer(t, model, followUp(first.text)))
  assert.deepEqual(warnings, [])
})

await test('after the engine closes and another opens on the same directory (a restart), the prefix comes back', async (t) => {
  const { model, states } = await setup(t)
  const before = await engineOn(t, model, states)
  const first = await ask(before, turn, 'peer:node1/agent')
  await before.close()
  const after = await engineOn(t, model, states)
  const second = await ask(after, followUp(first.text), 'peer:node1/agent')
  assert.ok(second.usage.cachedTokens >= first.usage.promptTokens, `reused ${second.usage.cachedTokens} of ${first.usage.promptTokens}`)
  assert.equal(second.text, await coldAnswer(t, model, followUp(first.text)))
  // The same prompt again, in full: all but its last token come from the state
  const again = await ask(after, turn, 'peer:node1/agent')
  assert.equal(again.text, first.text)
  assert.deepEqual(warnings, [])
})

await test('a saved prefix is only ever offered to its own requester', async (t) => {
  const { model, states } = await setup(t)
  const engine = await engineOn(t, model, states)
  const first = await ask(engine, turn, 'key:a')
  await engine.unload('tiny')
  await engine.load('tiny', model)
  const other = await ask(engine, followUp(first.text), 'key:b')
  assert.equal(other.usage.cachedTokens, 0, 'another key sending the same prompt evaluates it all')
  assert.equal((await ask(engine, followUp(first.text), 'local')).usage.cachedTokens, 0)
  const own = await ask(engine, followUp(first.text), 'key:a')
  assert.ok(own.usage.cachedTokens >= first.usage.promptTokens, 'the state was there for its owner')
  assert.equal(other.text, own.text)
  // A caller that names no requester never has anything saved
  const anonymous = await engineOn(t, model, join(states, '..', 'anonymous-states'), { slots: 1 })
  await ask(anonymous, turn, `anonymous:${'x'.repeat(8)}`)
  await anonymous.unload('tiny')
  assert.deepEqual(await stateFiles(join(states, '..', 'anonymous-states')), [])
  assert.deepEqual(warnings, [])
})

await test('a state file cut short or altered is removed and never loaded; the request is answered in full, correctly', async (t) => {
  const { model, states } = await setup(t)
  const engine = await engineOn(t, model, states, { slots: 1 })
  const first = await ask(engine, turn, 'key:a')
  const expected = await coldAnswer(t, model, followUp(first.text))
  await engine.unload('tiny')
  const [saved] = await stateFiles(states)
  const bytes = await readFile(join(states, saved))
  await truncate(join(states, saved), Math.floor(bytes.length / 2))
  await engine.load('tiny', model)
  const truncated = await ask(engine, followUp(first.text), 'key:a')
  assert.equal(truncated.usage.cachedTokens, 0)
  assert.equal(truncated.text, expected)
  assert.deepEqual(await stateFiles(states), [], 'the truncated file is gone')
  assert.match(warnings.at(-1) ?? '', /cut short or altered/)

  await engine.unload('tiny') // saves the follow-up's prefix
  const [again] = await stateFiles(states)
  const altered = await readFile(join(states, again))
  for (let i = altered.length >> 1; i < (altered.length >> 1) + 64; i++) altered[i] ^= 0xff
  await writeFile(join(states, again), altered)
  await engine.load('tiny', model)
  const tampered = await ask(engine, followUp(first.text), 'key:a')
  assert.equal(tampered.usage.cachedTokens, 0)
  assert.equal(tampered.text, expected)
  assert.deepEqual(await stateFiles(states), [], 'the altered file is gone')
  assert.match(warnings.at(-1) ?? '', /cut short or altered/)

  // A file of ours the index does not list (a copy, a save cut short by a crash) is removed when the store opens;
  // the indexed one stays and serves
  await engine.close()
  const [kept] = await stateFiles(states)
  const stray = `${'0'.repeat(64)}.state`
  await copyFile(join(states, kept), join(states, stray))
  await writeFile(join(states, `${'1'.repeat(64)}.state.${'2'.repeat(16)}.tmp`), 'partial')
  await writeFile(join(states, 'notes.txt'), 'not ours')
  const reopened = await engineOn(t, model, states, { slots: 1 })
  assert.deepEqual((await readdir(states)).sort(), ['index.json', kept, 'notes.txt'].sort())
  assert.ok((await ask(reopened, followUp(first.text), 'key:a')).usage.cachedTokens > 0)

  // A file that passes its checks but does not load back the tokens its record names (an index written over by hand)
  // is dropped after loading: the slot is cleared and the request answered in full
  await reopened.close()
  const index = JSON.parse(await readFile(join(states, 'index.json'), 'utf8')) as { states: Array<{ tokens: number[] }> }
  assert.equal(index.states.length, 1)
  index.states[0].tokens.push(index.states[0].tokens[0])
  await writeFile(join(states, 'index.json'), JSON.stringify(index))
  const misrecorded = await engineOn(t, model, states, { slots: 1 })
  const answered = await ask(misrecorded, followUp(first.text), 'key:a')
  assert.equal(answered.usage.cachedTokens, 0)
  assert.equal(answered.text, expected)
  assert.deepEqual(await stateFiles(states), [])
  assert.match(warnings.at(-1) ?? '', /did not load as recorded/)
})

await test('the disk budget evicts the least recently used states; a changed or removed model file takes its states with it', async (t) => {
  const { dir, model, states } = await setup(t)
  // Three requesters, one prompt: three states of one size. A is saved first, then B, then C.
  const one = await engineOn(t, model, states, { slots: 1 })
  for (const requester of ['key:a', 'key:b', 'key:c']) await ask(one, turn, requester)
  await one.close()
  const files = await stateFiles(states)
  assert.equal(files.length, 3)
  const sizes = await Promise.all(files.map(async (name) => (await readFile(join(states, name))).length))
  assert.equal(new Set(sizes).size, 1)

  // A is used again: B is now the least recently used, though C was saved after it
  const two = await engineOn(t, model, states, { slots: 1 })
  assert.ok((await ask(two, turn, 'key:a')).usage.cachedTokens > 0)
  await two.close()

  // Room for two: B goes when the store opens
  const three = await engineOn(t, model, states, { slots: 1, prefixStateBudgetBytes: Math.floor(sizes[0] * 2.5) })
  assert.equal((await stateFiles(states)).length, 2)
  assert.ok((await ask(three, turn, 'key:a')).usage.cachedTokens > 0)
  assert.ok((await ask(three, turn, 'key:c')).usage.cachedTokens > 0)
  assert.equal((await ask(three, turn, 'key:b')).usage.cachedTokens, 0)
  await three.close()

  // The same path with another modification time is another model: its states are removed, never loaded
  await utimes(model, new Date(), new Date(Date.now() + 60_000))
  const four = await engineOn(t, model, states, { slots: 1 })
  assert.deepEqual(await stateFiles(states), [])
  assert.equal((await ask(four, turn, 'key:a')).usage.cachedTokens, 0)
  await four.close()
  assert.equal((await stateFiles(states)).length, 1)

  // A deleted model's states go at the next open, whichever model it loads
  await rm(model)
  const { path: other } = await writeTinyGguf(join(dir, 'other.gguf'), { seed: 2, contextLength: 4096 })
  await engineOn(t, other, states, { slots: 1 })
  assert.deepEqual(await stateFiles(states), [])
  assert.deepEqual(warnings, [])
})

await test('a slot reused for another requester saves its owner\'s prefix first; the owner\'s next request restores it', async (t) => {
  const { model, states } = await setup(t)
  const engine = await engineOn(t, model, states, { slots: 1 })
  const first = await ask(engine, turn, 'key:a')
  const b = await ask(engine, otherTurn, 'key:b') // the only slot: a's prefix is saved, then cleared for b
  assert.equal(b.usage.cachedTokens, 0)
  const second = await ask(engine, followUp(first.text), 'key:a') // b's is saved, a's restored
  assert.ok(second.usage.cachedTokens >= first.usage.promptTokens, `reused ${second.usage.cachedTokens} of ${first.usage.promptTokens}`)
  assert.equal(second.text, await coldAnswer(t, model, followUp(first.text)))
  const bAgain = await ask(engine, otherTurn, 'key:b')
  assert.equal(bAgain.usage.cachedTokens, bAgain.usage.promptTokens - 1)
  assert.equal(bAgain.text, b.text)
  assert.deepEqual(warnings, [])
})

await test('a requester\'s cache-keyed sessions keep their states apart, and count in its limit together', async (t) => {
  const { model, states } = await setup(t)
  const engine = await engineOn(t, model, states, { slots: 1 })
  await ask(engine, turn, 'key:b')
  // One session more than a requester keeps states: each takes the only slot from the one before, which is saved first
  const sessions = Array.from({ length: MAX_PREFIX_STATES_PER_REQUESTER + 1 }, (_, i) => keyedRequester('key:a', `session ${i}`))
  assert.equal(new Set(sessions).size, sessions.length)
  for (const session of sessions) {
    assert.ok(session.startsWith('key:a#') && !session.includes('session'), session)
    assert.equal((await ask(engine, turn, session, 1)).usage.cachedTokens, 0, 'a session reuses nothing of another')
  }
  await engine.unload('tiny')
  const kept = (JSON.parse(await readFile(join(states, 'index.json'), 'utf8')) as { states: Array<{ requester: string }> }).states.map((state) => state.requester)
  assert.deepEqual(kept.filter((requester) => requester.startsWith('key:a#')).sort(), sessions.slice(1).sort(), 'the least recently used session went')
  assert.ok(kept.includes('key:b'), 'another requester is not crowded out by one requester\'s sessions')

  // A session's state is its own: not the requester's without a key, nor another session's
  await engine.load('tiny', model)
  assert.equal((await ask(engine, turn, 'key:a', 1)).usage.cachedTokens, 0)
  assert.equal((await ask(engine, turn, keyedRequester('key:a', 'another session'), 1)).usage.cachedTokens, 0)
  assert.ok((await ask(engine, turn, sessions[sessions.length - 1], 1)).usage.cachedTokens > 0)
  assert.deepEqual(warnings, [])
})

await test('a state is kept for the flash-attention setting it was made with: another setting evaluates in full and leaves it for the next run with its own', async (t) => {
  const { model, states } = await setup(t)
  const withIt = await engineOn(t, model, states, { flashAttention: 'on' })
  const first = await ask(withIt, turn, 'key:a')
  await withIt.close()
  assert.equal((await stateFiles(states)).length, 1)
  const without = await engineOn(t, model, states, { flashAttention: 'off' })
  const cold = await ask(without, followUp(first.text), 'key:a')
  assert.equal(cold.usage.cachedTokens, 0, 'a state of the other cache layout is not offered')
  await without.close()
  const again = await engineOn(t, model, states, { flashAttention: 'on' })
  const restored = await ask(again, followUp(first.text), 'key:a')
  assert.ok(restored.usage.cachedTokens >= first.usage.promptTokens, `reused ${restored.usage.cachedTokens} of ${first.usage.promptTokens}`)
  assert.deepEqual(warnings, [], 'nothing was refused by llama.cpp or removed as broken')
})

await test('a prefix is saved and restored while other generations run, not after them', async (t) => {
  const { model, states } = await setup(t)
  const engine = await engineOn(t, model, states, { slots: 4 })
  const first = await ask(engine, turn, 'key:a')
  // Three long generations on the other slots; node-llama-cpp's batch loop holds the context's lock while any decode
  // is queued, which a save and a load take too
  let running = 3
  const long = ['key:b', 'key:c', 'key:d'].map(async (requester) => {
    await ask(engine, [{ role: 'user', content: `tell me everything, ${requester}` }], requester, 900)
    running--
  })
  await waitFor(() => engine.stats().busySlots === 3, { what: 'the three long generations to hold their slots' })
  await ask(engine, [{ role: 'user', content: 'something short' }], 'key:e', 2) // a's slot, saved first
  const back = await ask(engine, followUp(first.text), 'key:a', 2) // e's slot, a's prefix restored into it
  assert.equal(running, 3, 'both finished while all three long ones still ran')
  assert.ok(back.usage.cachedTokens >= first.usage.promptTokens, `reused ${back.usage.cachedTokens} of ${first.usage.promptTokens}`)
  await Promise.all(long)
  assert.deepEqual(warnings, [])
})
