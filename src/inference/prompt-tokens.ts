// How every text a request brings (a chat's rendered prompt, a completion's prompt, embeddings' inputs, /v1/tokenize)
// becomes tokens without holding the node's event loop. Two rules:
// - A cheap bound first: no token of a model's vocabulary stands for more bytes of text than its longest one, so a
//   text longer than the context's tokens times that length cannot fit, and is refused before it is tokenized.
// - A text that passes and is still large is tokenized in a worker thread (tokenizer-thread.ts): llama.cpp's
//   tokenizers cost far more than linear on text outside the vocabulary (seconds for a long run of emoji,
//   bench/README.md), and a node must keep answering /health, streams and peers meanwhile.
// What then fits the context is small enough for node-llama-cpp to tokenize again on the loop where it does so itself.
import { Worker } from 'node:worker_threads'
import type { LlamaModel, LlamaText, Token } from 'node-llama-cpp'
import { ContextOverflowError, InvalidGenerationRequestError, QueueFullError } from './errors.ts'
import type { TokenizeAnswer, TokenizeJob } from './tokenizer-thread.ts'

/** Texts up to this many bytes are tokenized on the event loop: short enough for any text, measured (bench/README.md). */
export const INLINE_TOKENIZE_BYTES = 32 * 1024
/** Large texts that may wait for the tokenizer thread at once; the next one is refused as busy. */
export const MAX_QUEUED_TOKENIZATIONS = 16
const RETRY_AFTER_SECONDS = 1

/** The longest text, in UTF-8 bytes, any one token of this model's vocabulary stands for (at least 1). */
export function longestTokenBytes (model: LlamaModel): number {
  // The token strings are the one tokenizer array the engine keeps after a load (engine.ts, releaseTokenizerArrays).
  // A byte-level BPE writes each byte of text as one character, SentencePiece writes the text itself (a space as the
  // 3-byte ▁), WordPiece adds "##": in every case a token's string has at least as many bytes as the text it covers.
  const tokens = (model.fileInfo.metadata.tokenizer?.ggml as { tokens?: unknown } | undefined)?.tokens
  let longest = 1
  if (Array.isArray(tokens)) for (const token of tokens) if (typeof token === 'string') longest = Math.max(longest, Buffer.byteLength(token))
  return longest
}

/** The UTF-8 bytes of the text a rendered prompt holds (special tokens by their names' length). */
export function renderedBytes (text: LlamaText): number {
  let bytes = 0
  for (const value of text.values) bytes += Buffer.byteLength(typeof value === 'string' ? value : value.value)
  return bytes
}

export interface PromptTokenizerOptions {
  /** Where large texts are tokenized: the engine's. */
  thread: TokenizerThread
  modelID: string
  path: string
  model: LlamaModel
  /** Tokens one request may use. */
  contextLength: number
}

/** One loaded model's tokenizer, as requests use it (see the rules at the top of this file). */
export class PromptTokenizer {
  /** The most UTF-8 bytes of text one request may bring: the context's tokens times the longest token's bytes. */
  readonly maxBytes: number
  readonly #options: PromptTokenizerOptions
  readonly #longestToken: number

  constructor (options: PromptTokenizerOptions) {
    this.#options = options
    this.#longestToken = longestTokenBytes(options.model)
    this.maxBytes = options.contextLength * this.#longestToken
  }

  /** Refuses `bytes` of text in `param` that could not fit the context, whatever its tokens. */
  checkBytes (bytes: number, param: string, what: string): void {
    if (bytes <= this.maxBytes) return
    const { modelID, contextLength } = this.#options
    // A context overflow as any other (clients compact their history on it), counted as the fewest tokens it can be
    throw new ContextOverflowError(
      `${what} ${bytes} bytes of text; model ${modelID} reads at most ${this.maxBytes} per request ` +
      `(${contextLength} tokens of at most ${this.#longestToken} bytes each)`, param,
      { promptTokens: Math.ceil(bytes / this.#longestToken), roomTokens: contextLength - 2 })
  }

  /** The tokens of plain `text` (markers typed in it are not special), as `LlamaModel.tokenize` makes them. */
  async tokenize (text: string, param: string, options: { trimLeadingSpace?: boolean, what?: string, signal?: AbortSignal } = {}): Promise<Token[]> {
    const bytes = Buffer.byteLength(text)
    this.checkBytes(bytes, param, options.what ?? `${param} holds`)
    const trimLeadingSpace = options.trimLeadingSpace === true
    if (bytes <= INLINE_TOKENIZE_BYTES) return this.#options.model.tokenize(text, false, trimLeadingSpace ? 'trimLeadingSpace' : undefined)
    return await this.#options.thread.tokenize({ path: this.#options.path, text, trimLeadingSpace }, options.signal)
  }

  /** The tokens of a rendered prompt, as `LlamaText.tokenize` makes them. */
  async tokenizeRendered (text: LlamaText, param: string, options: { what?: string, signal?: AbortSignal } = {}): Promise<Token[]> {
    const bytes = renderedBytes(text)
    this.checkBytes(bytes, param, options.what ?? `${param} hold`)
    if (bytes <= INLINE_TOKENIZE_BYTES) return text.tokenize(this.#options.model.tokenizer)
    return await this.#options.thread.tokenize({ path: this.#options.path, text: text.toJSON(), trimLeadingSpace: false }, options.signal)
  }
}

interface Pending {
  resolve: (tokens: Token[]) => void
  reject: (err: Error) => void
}

/**
 * A tokenizer thread, started on the first large text (an engine owns one). Its jobs run one after another; a caller
 * that gives up stops waiting, and the thread finishes the job regardless (llama.cpp cannot be interrupted
 * mid-tokenization). It stays while models are loaded, and the engine ends it with the last one: an agent's turns come
 * minutes apart (its tool calls, the model's own answers; a cold turn of a 20k-token prefix on a CPU takes longer than
 * that) and each brings a prompt far over INLINE_TOKENIZE_BYTES, and a thread ended between them makes the next turn
 * pay its start again — node-llama-cpp and the model's vocabulary loaded anew, 1.3 s on the reference machine
 * (bench/README.md). What it holds meanwhile: at most two vocabularies (tokenizer-thread.ts).
 */
export class TokenizerThread {
  #worker: Worker | null = null
  #nextID = 0
  readonly #pending = new Map<number, Pending>()

  async tokenize (job: Omit<TokenizeJob, 'id'>, signal?: AbortSignal): Promise<Token[]> {
    signal?.throwIfAborted()
    if (this.#pending.size >= MAX_QUEUED_TOKENIZATIONS) throw new QueueFullError(MAX_QUEUED_TOKENIZATIONS, RETRY_AFTER_SECONDS)
    const worker = this.#start()
    const id = this.#nextID++
    const answer = new Promise<Token[]>((resolve, reject) => { this.#pending.set(id, { resolve, reject }) })
    worker.postMessage({ ...job, id } satisfies TokenizeJob)
    if (signal == null) return await answer
    const gaveUp = new Promise<never>((_resolve, reject) => {
      signal.addEventListener('abort', () => { reject(signal.reason) }, { once: true })
    })
    return await Promise.race([answer, gaveUp])
  }

  #start (): Worker {
    if (this.#worker != null) return this.#worker
    const worker = new Worker(new URL('./tokenizer-thread.ts', import.meta.url))
    worker.unref() // a node stopping never waits for it
    worker.on('message', (answer: TokenizeAnswer) => {
      const pending = this.#pending.get(answer.id)
      if (pending == null) return
      this.#pending.delete(answer.id)
      if ('tokens' in answer) pending.resolve(Array.from(answer.tokens) as Token[])
      else pending.reject(new InvalidGenerationRequestError(`The text could not be tokenized: ${answer.error}`, 'input'))
    })
    worker.on('error', (err) => { this.#end(worker, err) })
    worker.on('exit', () => { this.#end(worker, new Error('The tokenizer thread stopped')) })
    this.#worker = worker
    return worker
  }

  /** Whether the thread is running now. */
  get running (): boolean {
    return this.#worker != null
  }

  /** Ends the thread, giving its memory back; waiting callers are refused. The next large text starts it again. */
  close (): void {
    if (this.#worker != null) this.#end(this.#worker, null)
  }

  #end (worker: Worker, err: Error | null): void {
    if (this.#worker !== worker) return
    this.#worker = null
    for (const pending of this.#pending.values()) pending.reject(err ?? new Error('The tokenizer thread stopped'))
    this.#pending.clear()
    void worker.terminate()
  }
}
