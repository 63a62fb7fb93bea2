// One model in memory and the requests admitted on it: its generation context (its slots and their queue, made on the
// first chat or completion, so a model used only for embeddings never pays for them), its embedding context, and
// the count of requests in flight that an unload waits for. The set of loaded models is engine.ts.
import type { LlamaContext, LlamaModel, Token } from 'node-llama-cpp'
import type {
  ChatEvent, ChatRequest, CompletionEvent, CompletionRequest, DoneEvent, EmbeddingEvent, EmbeddingRequest, GenerateOptions
} from './chat.ts'
import { planChat, renderChat } from './chat-generation.ts'
import { SequenceOrderedBatching } from './batching.ts'
import { ChunkQueue } from './chunk-queue.ts'
import { planCompletion } from './completion.ts'
import { Embedder } from './embeddings.ts'
import { InvalidGenerationRequestError } from './errors.ts'
import type { ModelKind } from './model-file.ts'
export type { ModelKind } from './model-file.ts'
import { llamaModule } from './llama.ts'
import { checkTokenIDs } from './sampling.ts'
import { anonymousRequester, chooseSlot, forgetSlot, prepareSlot, type PrefixKeeper, type Requester } from './slot-cache.ts'
import { SlotPool } from './slot-pool.ts'
import type { ModelParts, Slot, SlotWork } from './slot-work.ts'

type LogFn = (obj: object, msg?: string) => void
/** The part of a pino logger the engine calls. */
export interface InferenceLogger {
  debug: LogFn
  info: LogFn
  warn: LogFn
  error: LogFn
}

/** How a model came to be loaded: asked for by `load` (stays until unloaded), or by a request naming it (evictable, unloaded after the keep-alive). */
export type LoadReason = 'explicit' | 'request'

export interface LoadedModelInfo {
  readonly modelID: string
  readonly path: string
  readonly sizeBytes: number
  /** `chat`, or `embedding` for a model that only embeds (refused for chat and completions). */
  readonly kind: ModelKind
  /** node-llama-cpp's estimate of what the model and its context take, RAM and VRAM together. */
  readonly memoryBytes: number
  /** Tokens one request may use, prompt and answer together. */
  readonly contextLength: number
  /** The context the model was trained with (the GGUF's `context_length`). */
  readonly trainContextLength: number
  readonly slots: number
  /** node-llama-cpp's name for the chat format in use, e.g. "ChatML"; "JinjaTemplate" means the GGUF's own template. */
  readonly chatTemplate: string
  /** Length of the model's embedding vectors. */
  readonly embeddingLength: number
  /** Where it runs: `cpu`, or the GPU backend holding some of its layers. */
  readonly backend: string
  /** Layers offloaded to the GPU (0 on the CPU), of `totalLayers`. */
  readonly gpuLayers: number
  readonly totalLayers: number
}

/** A loaded model as listings show it. */
export interface LoadedModelState extends LoadedModelInfo {
  readonly loadedBy: LoadReason
  readonly busySlots: number
  readonly queued: number
  /** Unix ms a request last settled on it (or it was loaded), and how long it has had none in flight (0 while busy). */
  readonly lastUsedAt: number
  readonly idleMs: number
}

export interface ModelInstanceOptions {
  threads: number
  slots: number
  queueSize: number
  retryAfterSeconds: number
  /** Flash attention for the generation context (`resolveFlashAttention`); embedding contexts take the model's default. */
  flashAttention: boolean | 'auto'
  /** Where slots' long prefixes are saved before they are lost, and restored from (prefix-states.ts); null keeps none. */
  prefixStates: PrefixKeeper | null
}

interface Generation {
  context: LlamaContext
  pool: SlotPool<Slot>
  slots: readonly Slot[]
}

/** Runs chats, completions and embeddings on one loaded model; the engine decides when it is loaded and unloaded. */
export class ModelInstance {
  readonly info: LoadedModelInfo
  readonly parts: ModelParts
  loadedBy: LoadReason
  /** Unix ms a request last settled here (or the model was loaded). */
  lastUsedAt = Date.now()
  readonly #log: InferenceLogger
  readonly #model: LlamaModel
  readonly #options: ModelInstanceOptions
  readonly #embedder: Embedder
  #generation: Promise<Generation> | null = null
  #pool: SlotPool<Slot> | null = null
  #context: LlamaContext | null = null
  /** Aborted by dispose: running generations stop, queued ones are refused. */
  readonly #unloading = new AbortController()
  /** Requests admitted and not yet settled (planning, queued, running): an unload waits until none is left. */
  #admitted = 0
  #whenIdle: Array<() => void> = []
  /** Called each time the last request in flight settles. */
  onIdle: (() => void) | null = null
  /** Called each time `busySlots` or `queued` changes; must not throw. */
  onStats: (() => void) | null = null

  constructor (info: LoadedModelInfo, parts: ModelParts, loadedBy: LoadReason, log: InferenceLogger, options: ModelInstanceOptions) {
    this.info = info
    this.parts = parts
    this.loadedBy = loadedBy
    this.#log = log
    this.#model = parts.model
    this.#options = options
    this.#embedder = new Embedder(parts.model, parts.prompt, {
      contextSize: info.contextLength, threads: options.threads, queueSize: options.queueSize, retryAfterSeconds: options.retryAfterSeconds,
      changed: () => { this.onStats?.() }
    })
  }

  /** Whether a request is in flight here (planning, queued or running). */
  get busy (): boolean {
    return this.#admitted > 0
  }

  get unloading (): boolean {
    return this.#unloading.signal.aborted
  }

  state (now = Date.now()): LoadedModelState {
    return {
      ...this.info,
      loadedBy: this.loadedBy,
      busySlots: this.busySlots,
      queued: this.queued,
      lastUsedAt: this.lastUsedAt,
      idleMs: this.busy ? 0 : Math.max(0, now - this.lastUsedAt)
    }
  }

  /** The generation context, once the first chat or completion has made it. */
  get context (): LlamaContext | null {
    return this.#context
  }

  get busySlots (): number {
    return this.#pool?.busy ?? 0
  }

  get queued (): number {
    return (this.#pool?.queued ?? 0) + this.#embedder.queued
  }

  /** Streams a chat's events, then `done` (engine.ts `generate`). */
  async * generate (request: ChatRequest, options: GenerateOptions = {}): AsyncGenerator<ChatEvent | DoneEvent, void, undefined> {
    yield * this.#onSlot(options, async (parts) => await planChat(parts, request, options.signal))
  }

  async * complete (request: CompletionRequest, options: GenerateOptions = {}): AsyncGenerator<CompletionEvent | DoneEvent, void, undefined> {
    yield * this.#onSlot(options, async (parts) => await planCompletion(parts, request, options.signal))
  }

  async * embed (request: EmbeddingRequest, options: GenerateOptions = {}): AsyncGenerator<EmbeddingEvent, void, undefined> {
    const release = this.#admit(options)
    try {
      yield * this.#embedder.embed(request, AbortSignal.any([this.#unloading.signal, ...(options.signal == null ? [] : [options.signal])]))
    } finally {
      release()
    }
  }

  async tokenize (text: string, options: { addSpecial?: boolean, signal?: AbortSignal } = {}): Promise<number[]> {
    const tokens = await this.parts.prompt.tokenize(text, 'content', { what: 'content holds', signal: options.signal })
    const bos = this.#model.tokens.bos
    return options.addSpecial === true && bos != null ? [bos, ...tokens] : tokens
  }

  async countChatTokens (request: ChatRequest, signal?: AbortSignal): Promise<number> {
    this.#refuseEmbeddingOnly()
    return (await renderChat(this.parts, request, signal)).tokens.length
  }

  detokenize (tokens: readonly number[]): string {
    checkTokenIDs(tokens, this.#model, 'tokens')
    return this.#model.detokenize(tokens as readonly Token[], false)
  }

  /** Resolves once no request is in flight here. */
  async idle (): Promise<void> {
    if (this.#admitted === 0) return
    await new Promise<void>((resolve) => { this.#whenIdle.push(resolve) })
  }

  /**
   * Frees the model: generations still running stop within a token and queued ones are refused with `reason` (an
   * unload waits for `idle()` first, so there are none; a closing engine does not wait). Once is enough: a second
   * call resolves with the first.
   */
  async dispose (reason: Error): Promise<void> {
    this.#disposed ??= this.#dispose(reason)
    await this.#disposed
  }

  #disposed: Promise<void> | null = null

  async #dispose (reason: Error): Promise<void> {
    this.#unloading.abort(reason)
    this.#pool?.close(reason)
    await this.idle()
    const generation = await this.#generation?.catch(() => null)
    await this.#keepPrefixes(generation)
    await this.#embedder.dispose(reason)
    await generation?.context.dispose()
    await this.#model.dispose()
  }

  /**
   * Saves the slots' long prefixes before the context goes, once no request runs (the keeper passes over short ones,
   * anonymous requesters' and those a failed or aborted generation left), and waits until they are on disk.
   */
  async #keepPrefixes (generation: Generation | null | undefined): Promise<void> {
    const keeper = this.#options.prefixStates
    if (keeper == null || generation == null) return
    for (const slot of generation.slots) await keeper.keep(slot)
    await keeper.settled()
  }

  #refuseEmbeddingOnly (): void {
    if (this.info.kind === 'embedding') {
      throw new InvalidGenerationRequestError(`Model ${this.info.modelID} is an embedding model: it answers embeddings requests only, not chats or completions`, 'model')
    }
  }

  /** Lets a request in; `release` must be called once it has settled. */
  #admit (options: GenerateOptions): () => void {
    options.signal?.throwIfAborted()
    if (this.#unloading.signal.aborted) throw this.#unloading.signal.reason
    this.#admitted++
    let released = false
    return () => {
      if (released) return
      released = true
      this.lastUsedAt = Date.now()
      if (--this.#admitted === 0) {
        for (const wake of this.#whenIdle.splice(0)) wake()
        this.onIdle?.()
      }
    }
  }

  /** The generation context and its slots, made on first use; a failure (out of memory) lets a later request try again. */
  async #slots (): Promise<Generation> {
    this.#generation ??= this.#openGeneration().catch((err: unknown) => {
      this.#generation = null
      throw err
    })
    return await this.#generation
  }

  async #openGeneration (): Promise<Generation> {
    const batching = new SequenceOrderedBatching()
    const context = await this.#model.createContext({
      sequences: this.#options.slots,
      contextSize: this.info.contextLength,
      threads: this.#options.threads,
      flashAttention: this.#options.flashAttention,
      batching: batching.options
    })
    batching.attach(context)
    const slots: Slot[] = []
    for (let i = 0; i < this.#options.slots; i++) slots.push({ sequence: context.getSequence(), owner: null, lastUsed: 0 })
    const pool = new SlotPool(slots, { queueSize: this.#options.queueSize, retryAfterSeconds: this.#options.retryAfterSeconds, changed: () => { this.onStats?.() } })
    if (this.#unloading.signal.aborted) pool.close(this.#unloading.signal.reason as Error)
    this.#pool = pool
    this.#context = context
    return { context, pool, slots }
  }

  /** Plans `request` against the model, runs it on a slot, and streams its events as they come. */
  async * #onSlot<E> (options: GenerateOptions, plan: (parts: ModelParts) => Promise<SlotWork<E>>): AsyncGenerator<E | DoneEvent, void, undefined> {
    this.#refuseEmbeddingOnly()
    const { signal } = options
    const requester = options.requester ?? anonymousRequester()
    const release = this.#admit(options)
    const events = new ChunkQueue<E>()
    const consumerLeft = new AbortController()
    let settled: Promise<void> | null = null
    let outcome: Promise<DoneEvent> | null = null
    try {
      const work = await plan(this.parts)
      const { pool } = await this.#slots()
      const slot = await pool.acquire({ signal, choose: (free) => chooseSlot(free, requester, work.tokens) })
      if (this.#unloading.signal.aborted) {
        // unloaded between the hand-over and now: the model may already be disposed
        pool.release(slot)
        throw this.#unloading.signal.reason
      }
      const stopSignals = [consumerLeft.signal, this.#unloading.signal, ...(signal == null ? [] : [signal])]
      const running = this.#run(slot, requester, work, events, AbortSignal.any(stopSignals))
      outcome = running
      // The slot goes back when the generation settles, not when the consumer next pulls: a consumer stuck on a slow
      // socket must not hold a slot that queued requests wait for (nor keep an unload waiting).
      settled = running
        .then(() => { events.end() }, (err: unknown) => {
          forgetSlot(slot)
          events.fail(err)
        })
        .finally(() => {
          pool.release(slot)
          release()
        })
    } finally {
      if (settled == null) release()
    }
    try {
      for await (const event of events) yield event
      if (outcome != null) yield await outcome
    } finally {
      consumerLeft.abort(new Error('The consumer stopped reading the generation')) // a no-op once it has finished
      await settled
    }
  }

  async #run<E> (slot: Slot, requester: Requester, work: SlotWork<E>, events: ChunkQueue<E>, signal: AbortSignal): Promise<DoneEvent> {
    const started = performance.now()
    // The slot keeps what its last generation evaluated, and node-llama-cpp evaluates only the part of this prompt
    // that differs (a chat resending its history pays for the new turn, not the whole conversation). Only within one
    // requester: a slot holding anyone else's tokens is cleared first (slot-cache.ts). A long prefix the slot would
    // lose is saved to disk first, and one saved earlier that serves this prompt better is restored (prefix-states.ts).
    const cachedTokens = await prepareSlot(slot, requester, work.tokens, this.#options.prefixStates)
    const done = await work.run(slot, (event) => { events.push(event) }, signal)
    const usage = { ...done.usage, cachedTokens }
    this.#log.debug({ modelID: this.info.modelID, finishReason: done.finishReason, ...usage, ms: Math.round(performance.now() - started) }, 'generation finished')
    return { ...done, usage }
  }
}

/** The chat format node-llama-cpp picks for the model (its own template, or a known one). */
export async function chatWrapperFor (model: LlamaModel): Promise<ModelParts['chatWrapper']> {
  const { resolveChatWrapper } = await llamaModule()
  return resolveChatWrapper(model)
}
