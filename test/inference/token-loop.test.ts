import { test } from 'node:test'
import type { TestContext } from 'node:test'
import assert from 'node:assert/strict'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { LlamaChat, LlamaCompletion, type LlamaContextSequence, type LlamaModel } from 'node-llama-cpp'
import { getSharedLlama, LocalEngine, type ChatRequest, type CompletionRequest, type FinishReason } from '../../src/inference/index.ts'
import { planSampling } from '../../src/inference/sampling.ts'
import { toChatHistory } from '../../src/inference/tools.ts'
import { writeTinyGguf } from '../support/tiny-gguf.ts'

// Plain chats and completions run on meshnode's own token loop (src/inference/token-loop.ts), not on node-llama-cpp's
// LlamaChat and LlamaCompletion. Here the loop is held to them: the same request and sampling give the same text,
// finish reason and token count as node-llama-cpp's own classes on a context of their own. The model is "unruly"
// (tiny-gguf.ts): sampled answers end by themselves and hold byte tokens, so end tokens and characters split across
// tokens are exercised too.

interface Outcome { text: string, finishReason: FinishReason, completionTokens: number }

/** node-llama-cpp's own run of a request, on a sequence of its own: what the loop must match. */
class Reference {
  private readonly model: LlamaModel
  private readonly sequence: LlamaContextSequence
  constructor (model: LlamaModel, sequence: LlamaContextSequence) {
    this.model = model
    this.sequence = sequence
  }

  tokenize (text: string): number[] {
    return this.model.tokenize(text, false, 'trimLeadingSpace')
  }

  async chat (request: ChatRequest): Promise<Outcome> {
    const chat = new LlamaChat({ contextSequence: this.sequence })
    try {
      return await this.run(request, async (options) => {
        const { metadata } = await chat.generateResponse(toChatHistory(request.messages), options)
        return metadata.stopReason
      })
    } finally {
      chat.dispose({ disposeSequence: false })
    }
  }

  async complete (request: CompletionRequest): Promise<Outcome> {
    const completion = new LlamaCompletion({ contextSequence: this.sequence })
    try {
      return await this.run(request, async (options) => (await completion.generateCompletionWithMeta(request.prompt, options)).metadata.stopReason)
    } finally {
      completion.dispose({ disposeSequence: false })
    }
  }

  private async run (request: ChatRequest | CompletionRequest, generate: (options: Awaited<ReturnType<typeof planSampling>>['sampling'] & { maxTokens: number, onTextChunk: (text: string) => void }) => Promise<string>): Promise<Outcome> {
    await this.sequence.clearHistory()
    const { maxTokens, sampling } = await planSampling(request, this.model, 400)
    let text = ''
    const before = this.sequence.tokenMeter.getState()
    const stopReason = await generate({ ...sampling, maxTokens, onTextChunk: (chunk: string) => { text += chunk } })
    return {
      text,
      finishReason: stopReason === 'maxTokens' ? 'length' : 'stop',
      completionTokens: this.sequence.tokenMeter.diff(before).usedOutputTokens
    }
  }
}

async function collect (events: AsyncIterable<{ type: string, text?: string, finishReason?: FinishReason, usage?: { completionTokens: number } }>): Promise<Outcome> {
  let text = ''
  for await (const event of events) {
    if (event.type === 'delta') text += event.text
    if (event.type === 'done') return { text, finishReason: event.finishReason as FinishReason, completionTokens: event.usage?.completionTokens ?? -1 }
  }
  throw new Error('the stream ended without a done event')
}

/** How many times node-llama-cpp's LlamaChat generated, by anyone: the engine's requests must not add to it. */
let llamaChatRuns = 0
const generateResponse = LlamaChat.prototype.generateResponse
LlamaChat.prototype.generateResponse = async function (this: LlamaChat, ...args: Parameters<LlamaChat['generateResponse']>) {
  llamaChatRuns++
  return await generateResponse.apply(this, args)
}

async function setup (t: TestContext, slots = 1): Promise<{ engine: LocalEngine, reference: Reference }> {
  const dir = await mkdtemp(join(tmpdir(), 'meshnode-loop-'))
  t.after(() => rm(dir, { recursive: true, force: true }))
  const { path } = await writeTinyGguf(join(dir, 'unruly.gguf'), { seed: 3, unruly: true, contextLength: 2048 })
  // Flash attention off on both sides: a different attention kernel gives slightly different logits, which sampling
  // at temperature 1 turns into a different text sooner or later
  const engine = new LocalEngine({}, { threads: 1, slots, flashAttention: 'off' })
  t.after(() => engine.close())
  await engine.load('unruly', path)
  const llama = await getSharedLlama(1)
  const model = await llama.loadModel({ modelPath: path })
  const context = await model.createContext({ sequences: 1, contextSize: engine.loaded()?.contextLength, threads: 1, flashAttention: false })
  t.after(async () => { await context.dispose(); await model.dispose() })
  return { engine, reference: new Reference(model, context.getSequence()) }
}

const ask = (content: string, extra: Partial<ChatRequest> = {}): ChatRequest => ({ messages: [{ role: 'user', content }], maxTokens: 60, ...extra })

await test('a chat on the token loop answers exactly as LlamaChat: text, finish reason, tokens', async (t) => {
  const { engine, reference } = await setup(t)
  const requests: ChatRequest[] = [
    ask('hello there', { temperature: 0 }),
    ...[1, 2, 3, 4, 5, 6, 7, 8].map((seed) => ask(`tell me about the network, number ${seed}`, { temperature: 1, seed })),
    ask('what is a credit', { temperature: 0.8, topP: 0.7, topK: 12, seed: 11 }),
    ask('what is a credit', { temperature: 1, seed: 12, logitBias: { 40: 100, 41: -100, 42: 5 } }),
    // a trailing assistant message is continued, not answered
    { messages: [{ role: 'system', content: 'be brief' }, { role: 'user', content: 'hello' }, { role: 'assistant', content: 'the answer is' }], temperature: 0, maxTokens: 30 }
  ]
  const outcomes: Outcome[] = []
  for (const request of requests) {
    const runs = llamaChatRuns
    const ours = await collect(engine.generate(request))
    assert.equal(llamaChatRuns, runs, 'the engine ran this chat on its own loop')
    assert.deepEqual(ours, await reference.chat(request), JSON.stringify(request))
    outcomes.push(ours)
  }
  // The cases above reached every way an answer ends, and characters that span tokens
  assert.ok(outcomes.some((o) => o.finishReason === 'stop'), 'an answer ended with an end-of-generation token')
  assert.ok(outcomes.some((o) => o.finishReason === 'length'), 'an answer ran to maxTokens')
  assert.ok(outcomes.some((o) => /[^\x20-\x7e]/.test(o.text)), 'an answer held a byte token')
})

await test('stop strings on the token loop end the answer where LlamaChat ends it', async (t) => {
  const { engine, reference } = await setup(t)
  const free = await collect(engine.generate(ask('hello there', { temperature: 0, maxTokens: 40 })))
  const words = free.text.split(' ').filter((word) => /^[a-z]{3,}$/.test(word))
  assert.ok(words.length >= 3, `no usable stop words in ${JSON.stringify(free.text)}`)
  for (const stop of [words[1], words.at(-1) as string, words[1].slice(1, 3)]) {
    const request = ask('hello there', { temperature: 0, maxTokens: 40, stop: ['never appears', stop] })
    const ours = await collect(engine.generate(request))
    assert.deepEqual(ours, await reference.chat(request), `stop ${stop}`)
    assert.equal(ours.finishReason, 'stop')
    assert.equal(ours.text, free.text.slice(0, free.text.indexOf(stop)))
  }
})

await test('a character spelled in three byte tokens is one character to stop strings, as in LlamaChat', async (t) => {
  const { engine, reference } = await setup(t)
  const euro = reference.tokenize('€')
  assert.equal(euro.length, 3, 'the tiny model spells € in three byte tokens')
  // The three bytes all but forced, in a random order: now and then they spell €
  const logitBias = Object.fromEntries(euro.map((token) => [String(token), 100]))
  const finishes: FinishReason[] = []
  for (const seed of [1, 2, 3, 4, 5, 6]) {
    const request = ask('money', { temperature: 1, seed, maxTokens: 40, logitBias, stop: ['€'] })
    const ours = await collect(engine.generate(request))
    assert.deepEqual(ours, await reference.chat(request), `seed ${seed}`)
    assert.ok(!ours.text.includes('€'))
    finishes.push(ours.finishReason)
  }
  assert.ok(finishes.includes('stop'), 'a stop string of a three-token character ended an answer')
})

await test('a text completion on the token loop continues the prompt as LlamaCompletion does', async (t) => {
  const { engine, reference } = await setup(t)
  for (const request of [
    { prompt: 'the network of peers', maxTokens: 40, temperature: 0 },
    ...[21, 22, 23].map((seed) => ({ prompt: 'once upon a time', maxTokens: 50, temperature: 1, seed }))
  ] satisfies CompletionRequest[]) {
    const ours = await collect(engine.complete(request))
    assert.deepEqual(ours, await reference.complete(request), JSON.stringify(request))
  }
})

await test('streams on the token loop decode together and each answers as it would alone', async (t) => {
  const { engine, reference } = await setup(t, 3)
  const requests = [31, 32, 33].map((seed) => ask(`a story about peer ${seed}`, { temperature: 1, seed, maxTokens: 80 }))
  const together = await Promise.all(requests.map(async (request) => await collect(engine.generate(request))))
  for (const [i, request] of requests.entries()) assert.deepEqual(together[i], await reference.chat(request))
})

await test('a chat with tools still runs on LlamaChat, which knows the model\'s function-call format', async (t) => {
  const { engine } = await setup(t)
  const runs = llamaChatRuns
  const outcome = await collect(engine.generate(ask('what time is it', {
    temperature: 0, maxTokens: 20, tools: [{ name: 'clock', parameters: { type: 'object', properties: {} } }]
  })))
  assert.equal(llamaChatRuns, runs + 1)
  assert.ok(outcome.completionTokens > 0)
})
