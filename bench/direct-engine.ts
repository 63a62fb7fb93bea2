// Child process of bench:llama-server: node-llama-cpp called directly (no HTTP, no meshnode), driven over IPC, so
// that its memory is measured on its own. `generate` runs chats; `complete` is the raw engine, one text completion
// (`LlamaCompletion.generateCompletion`) on the single sequence: the floor the HTTP stream's decode is held to.
// What a program using the library in the obvious way gets: threads 1,
// node-llama-cpp's default batching, one LlamaChat per sequence, and a context with as many sequences as streams run
// at once (one for the single stream and the chat, `slots` for the parallel streams). A single stream on a context of
// several sequences would pay node-llama-cpp's next-turn dispatch (setImmediate) on every token, a cost a program
// running one stream would not have. So this process holds the KV cache of 1 + `slots` sequences.
import { getLlama, LlamaChat, LlamaCompletion, resolveChatWrapper, type ChatHistoryItem } from 'node-llama-cpp'

export type DirectJob =
  | { op: 'generate', messages: Array<{ role: 'system' | 'user' | 'assistant', content: string }>, maxTokens: number, streams: number, keepHistory: boolean }
  | { op: 'complete', prompt: string, maxTokens: number }

export interface DirectResult { ttftMs: number, lastMs: number, endMs: number, tokens: number, text: string }

const [modelPath, slotsArgument, contextArgument, flashAttentionArgument = 'auto'] = process.argv.slice(2)
// Mapped here rather than imported from src/inference: this process's memory is measured, and meshnode's modules are not
// part of it.
const flashAttention = flashAttentionArgument === 'auto' ? 'auto' : flashAttentionArgument === 'on'
const slots = Number(slotsArgument)
const llama = await getLlama({ gpu: false, build: 'never', maxThreads: 1, progressLogs: false })
const model = await llama.loadModel({ modelPath })
const chatWrapper = resolveChatWrapper(model)
const chatsFor = new Map<number, LlamaChat[]>()
for (const sequences of new Set([1, slots])) {
  const context = await model.createContext({ sequences, contextSize: Number(contextArgument), threads: 1, flashAttention })
  chatsFor.set(sequences, Array.from({ length: sequences }, () => new LlamaChat({ contextSequence: context.getSequence(), chatWrapper })))
}

function toHistory (messages: Extract<DirectJob, { op: 'generate' }>['messages']): ChatHistoryItem[] {
  const history = messages.map((m): ChatHistoryItem => m.role === 'assistant'
    ? { type: 'model', response: [m.content] }
    : { type: m.role, text: m.content })
  history.push({ type: 'model', response: [] })
  return history
}

async function generate (chat: LlamaChat, job: Extract<DirectJob, { op: 'generate' }>, started: number): Promise<DirectResult> {
  // keepHistory: the sequence keeps its tokens and LlamaChat evaluates only what differs (prefix reuse, as a program
  // holding one conversation per sequence would); otherwise every generation starts from an empty sequence.
  if (!job.keepHistory) await chat.sequence.clearHistory()
  return await timed(chat, started, async (onTextChunk) => (await chat.generateResponse(toHistory(job.messages), {
    maxTokens: job.maxTokens, temperature: 0, repeatPenalty: false, onTextChunk
  })).response)
}

/**
 * Runs one generation on `chat`'s sequence and times it from `started`: the first and last non-empty text chunks, the
 * end, and the output tokens its sequence's meter counted.
 */
async function timed (chat: LlamaChat, started: number, generate: (onTextChunk: (text: string) => void) => Promise<string>): Promise<DirectResult> {
  let first = 0
  let last = 0
  const before = chat.sequence.tokenMeter.getState()
  const text = await generate((chunk) => {
    if (chunk === '') return
    last = performance.now()
    if (first === 0) first = last
  })
  const tokens = chat.sequence.tokenMeter.diff(before).usedOutputTokens
  const end = performance.now()
  return { ttftMs: first - started, lastMs: last - started, endMs: end - started, tokens, text }
}

let completion: LlamaCompletion | undefined

async function complete (job: Extract<DirectJob, { op: 'complete' }>, started: number): Promise<DirectResult> {
  const [chat] = chatsFor.get(1) ?? []
  await chat.sequence.clearHistory()
  const engine = completion ??= new LlamaCompletion({ contextSequence: chat.sequence })
  return await timed(chat, started, async (onTextChunk) => await engine.generateCompletion(job.prompt, {
    maxTokens: job.maxTokens, temperature: 0, repeatPenalty: false, onTextChunk
  }))
}

process.on('message', (job: DirectJob) => {
  const started = performance.now()
  if (job.op === 'complete') {
    complete(job, started).then((result) => { process.send?.({ results: [result] }) }, (err: unknown) => { process.send?.({ error: String(err) }) })
    return
  }
  const chats = chatsFor.get(job.streams) ?? chatsFor.get(slots) ?? []
  Promise.all(chats.slice(0, job.streams).map(async (chat) => await generate(chat, job, started))).then(
    (results) => { process.send?.({ results }) },
    (err: unknown) => { process.send?.({ error: String(err) }) })
})
process.send?.({ ready: true })
