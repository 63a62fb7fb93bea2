import { setImmediate as nextTurn } from 'node:timers/promises'
import type { LlamaEmbeddingContext, LlamaModel } from 'node-llama-cpp'
import type { EmbeddingEvent, EmbeddingRequest } from './chat.ts'
import { ContextOverflowError, InvalidGenerationRequestError } from './errors.ts'
import type { PromptTokenizer } from './prompt-tokens.ts'
import { SlotPool } from './slot-pool.ts'

/** Most strings one embeddings request may hold (OpenAI's limit is 2048). */
export const MAX_EMBEDDING_INPUTS = 2048
/** Longest embedding vector a peer may answer with: twice the largest models' (16384). */
export const MAX_EMBEDDING_LENGTH = 32_768

export interface EmbedderOptions {
  /** Tokens one input may have; the embedding context is made this size. */
  contextSize: number
  threads: number
  /** Requests that may wait while another is embedded; the next one gets QueueFullError. */
  queueSize: number
  retryAfterSeconds: number
  /** Called each time a request takes its turn, waits for it, or is done (`SlotPoolOptions.changed`). */
  changed?: () => void
}

/**
 * Embeddings of the loaded model, on a context of their own made on first use (a node that never embeds pays
 * nothing for it) and disposed with the model. One request at a time uses it; others wait in a bounded queue.
 */
export class Embedder {
  readonly #model: LlamaModel
  readonly #prompt: PromptTokenizer
  readonly #options: EmbedderOptions
  readonly #turn: SlotPool<object>
  #context: Promise<LlamaEmbeddingContext> | null = null

  constructor (model: LlamaModel, prompt: PromptTokenizer, options: EmbedderOptions) {
    this.#model = model
    this.#prompt = prompt
    this.#options = options
    this.#turn = new SlotPool([{}], { queueSize: options.queueSize, retryAfterSeconds: options.retryAfterSeconds, changed: options.changed })
  }

  get queued (): number {
    return this.#turn.queued
  }

  get busy (): boolean {
    return this.#turn.busy > 0
  }

  /** One `embedding` event per input, in order, then `done` with the tokens read. Stops between inputs on abort. */
  async * embed (request: EmbeddingRequest, signal?: AbortSignal): AsyncGenerator<EmbeddingEvent, void, undefined> {
    const input = request.input
    if (!Array.isArray(input) || input.length === 0 || input.length > MAX_EMBEDDING_INPUTS) {
      throw new InvalidGenerationRequestError(`input must hold 1 to ${MAX_EMBEDDING_INPUTS} strings`, 'input')
    }
    input.forEach((text, i) => {
      if (typeof text !== 'string' || text === '') throw new InvalidGenerationRequestError(`input[${i}] must be a non-empty string`, `input.${i}`)
    })
    // Every input is measured before any is embedded, and before the request waits its turn: a request fails whole,
    // not after half its work. One input at a time, letting the event loop turn between them (prompt-tokens.ts).
    for (const [i, text] of input.entries()) {
      const tokens = (await this.#prompt.tokenize(text, `input.${i}`, { what: `input[${i}] holds`, signal })).length
      if (tokens > this.#options.contextSize) {
        throw new ContextOverflowError(`input[${i}] takes ${tokens} tokens; this model embeds at most ${this.#options.contextSize}`, `input.${i}`, { promptTokens: tokens, roomTokens: this.#options.contextSize })
      }
      await nextTurn()
    }
    const turn = await this.#turn.acquire({ signal })
    try {
      const context = await this.#open()
      let promptTokens = 0
      for (const [index, text] of input.entries()) {
        signal?.throwIfAborted()
        // The exact count, with the tokens the model adds around an input; one input at a time, as each is embedded,
        // so the event loop turns between them
        promptTokens += context.calculateInputLength(text)
        const { vector } = await context.getEmbeddingFor(text)
        yield { type: 'embedding', index, vector: unitLength(vector) }
      }
      yield { type: 'done', finishReason: 'stop', usage: { promptTokens, completionTokens: 0, totalTokens: promptTokens, cachedTokens: 0 } }
    } finally {
      this.#turn.release(turn)
    }
  }

  /** Refuses waiting and later requests with `reason` and frees the context; the engine calls it once none runs. */
  async dispose (reason: Error): Promise<void> {
    this.#turn.close(reason)
    if (this.#context == null) return
    const context = await this.#context.catch(() => null) // a context that failed to open holds nothing
    await context?.dispose()
  }

  async #open (): Promise<LlamaEmbeddingContext> {
    this.#context ??= this.#model.createEmbeddingContext({
      contextSize: this.#options.contextSize,
      // one batch holds a whole input: llama.cpp pools over the tokens of one batch
      batchSize: this.#options.contextSize,
      threads: this.#options.threads
    }).catch((err: unknown) => {
      this.#context = null // a failed open (out of memory) may succeed later; the next request tries again
      throw err
    })
    return await this.#context
  }
}

/**
 * The vector scaled to length 1, as OpenAI's embeddings are (and Ollama's): clients compare them by dot product. llama.cpp
 * answers the pooled values as they are. An all-zero vector stays as it is.
 */
export function unitLength (vector: readonly number[]): number[] {
  let sum = 0
  for (const value of vector) sum += value * value
  const norm = Math.sqrt(sum)
  return norm === 0 ? [...vector] : vector.map((value) => value / norm)
}
