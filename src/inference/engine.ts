// The local engine: one loaded model and the generations admitted on it. Over ~400 lines on purpose: model
// lifecycle (load, swap, unload, close) and admission (waiting out a swap, counting requests in, releasing slots)
// share one state (the active model, its admitted count, its slot pool) whose every transition must be read beside
// the others; what stands alone is already out (slot-pool, slot-work, slot-cache, batching, chat-generation,
// completion, embeddings, chunk-queue).
import { stat } from 'node:fs/promises'
import { availableParallelism } from 'node:os'
import type { GgufFileInfo, Llama, LlamaContext, LlamaModel, Token } from 'node-llama-cpp'
import type {
  ChatEngine, ChatEvent, ChatRequest, CompletionEvent, CompletionRequest, DoneEvent, EmbeddingEvent, EmbeddingRequest,
  GenerateOptions, InferenceEvent, InferenceRequest
} from './chat.ts'
import { planChat, renderChat } from './chat-generation.ts'
import { SequenceOrderedBatching } from './batching.ts'
import { ChunkQueue } from './chunk-queue.ts'
import { planCompletion } from './completion.ts'
import { Embedder } from './embeddings.ts'
import { ModelLoadError, ModelSwappedError, NoModelLoadedError, QueueFullError } from './errors.ts'
import { Accelerator } from './gpu.ts'
import { compactHeap } from './heap.ts'
import { PromptTokenizer, TokenizerThread } from './prompt-tokens.ts'
import { defaultInferenceThreads, llamaModule } from './llama.ts'
import { checkTokenIDs } from './sampling.ts'
import { anonymousRequester, chooseSlot, forgetSlot, prepareSlot, type Requester } from './slot-cache.ts'
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

export interface LocalEngineDeps {
  /** Default: silent. */
  log?: InferenceLogger
  /** The llama.cpp build models run on (CPU or a GPU backend). Default: the CPU. */
  accelerator?: Accelerator
}

export interface LocalEngineOptions {
  /** llama.cpp threads. Default: `os.availableParallelism() - 1`, between 1 and 4 (more oversubscribes small machines). */
  threads?: number
  /** Generations that run in parallel, each on its own context sequence. @default DEFAULT_SLOTS (2) */
  slots?: number
  /** Requests that may wait for a slot; the next one gets QueueFullError. @default DEFAULT_QUEUE_SIZE (16) */
  queueSize?: number
  /** Tokens one request may use, prompt and answer together, capped at the model's training context. @default DEFAULT_CONTEXT_SIZE (4096) */
  contextSize?: number
  /** llama.cpp's flash attention for the model's contexts, generation and embeddings (`serve --flash-attention`). @default 'auto' */
  flashAttention?: FlashAttention
}

export interface LoadOptions {
  /**
   * Let the running and queued generations of the current model finish before it is unloaded (a model swapped in
   * for a request), instead of aborting them (an explicit load: the caller wants the memory now). Default false.
   */
  whenIdle?: boolean
}

export interface LoadedModelInfo {
  readonly modelID: string
  readonly path: string
  readonly sizeBytes: number
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

export interface EngineStats {
  slots: number
  busySlots: number
  queued: number
}

/** Generations one loaded model runs at once: the node's default too (src/config.ts, `serve --slots`). */
export const DEFAULT_SLOTS = 2
/** Requests that may wait for a slot before the next gets QueueFullError: the node's default too. */
export const DEFAULT_QUEUE_SIZE = 16
/** Tokens one request may use, prompt and answer together, unless the model was trained with fewer: the node's default too. */
export const DEFAULT_CONTEXT_SIZE = 4096
/**
 * Flash attention, as llama-server's `-fa` and node-llama-cpp's `flashAttention` take it: `on`, `off`, or `auto`
 * (llama-server's default, and ours), which lets llama.cpp use it wherever the backend supports it, except on the CPU
 * for a model whose attention heads are narrower than FLASH_ATTENTION_HEAD_STEP (`resolveFlashAttention`).
 */
export type FlashAttention = 'auto' | 'on' | 'off'
export const FLASH_ATTENTION_CHOICES: readonly FlashAttention[] = ['auto', 'on', 'off']
/** A FlashAttention choice as node-llama-cpp takes it (`flashAttention`, `defaultContextFlashAttention`). */
export function llamaFlashAttention (choice: FlashAttention): 'auto' | boolean {
  return choice === 'auto' ? 'auto' : choice === 'on'
}
/**
 * On the CPU, llama.cpp's flash attention takes a head's dot products FLASH_ATTENTION_HEAD_STEP values at a time (its
 * AVX-512 f16 step) and what is left one value at a time, which node-llama-cpp's prebuilt CPU libraries run slowly.
 * Measured (bench/README.md, "Session 9"), 780 tokens into a context: for heads of 48, all of it left over, a token took
 * 1.9x as long with flash attention (prompts 0.8x); for 96, 1.2x (but prompts 0.64x and short contexts 0.83x, a loss
 * overall); for 64 and 128 it is faster throughout. So on the CPU `auto` leaves it off for heads narrower than the step.
 * (llama-server built from the same source with a newer compiler pays nothing for it.)
 */
export const FLASH_ATTENTION_HEAD_STEP = 64
/** What `choice` means for one model: `headSize` from its GGUF (null if it does not say), `onCpu` where it runs. */
export function resolveFlashAttention (choice: FlashAttention, headSize: number | null, onCpu: boolean): 'auto' | boolean {
  if (choice === 'auto' && onCpu && headSize != null && headSize < FLASH_ATTENTION_HEAD_STEP) return false
  return llamaFlashAttention(choice)
}
// We have no service-time estimate worth more than this; a client retrying after a second finds a slot or asks again.
const QUEUE_FULL_RETRY_AFTER_SECONDS = 1

const SILENT_LOGGER: InferenceLogger = { debug: () => undefined, info: () => undefined, warn: () => undefined, error: () => undefined }

interface ActiveModel {
  info: LoadedModelInfo
  parts: ModelParts
  model: LlamaModel
  context: LlamaContext
  pool: SlotPool<Slot>
  embedder: Embedder
  /** Aborted by unload: running generations stop, queued ones are refused. */
  unloading: AbortController
  /** Requests admitted and not yet settled (planning, queued, running); a swap waits until none is left. */
  admitted: number
  whenIdle: Array<() => void>
}

/**
 * Runs generations on one local GGUF model with node-llama-cpp: chats (in the model's own chat template, with
 * tools) and text completions on a fixed number of slots (context sequences of one context, decoded in shared
 * batches) behind one bounded FIFO queue; embeddings on a context of their own. One model at a time: loading
 * another swaps it in.
 */
export class LocalEngine implements ChatEngine {
  private readonly log: InferenceLogger
  private readonly accelerator: Accelerator
  private readonly threads: number
  private readonly slotCount: number
  private readonly queueSize: number
  private readonly contextSize: number
  private readonly flashAttention: FlashAttention
  private active: ActiveModel | null = null
  /** load/unload/close run one after another; each waits for the previous whatever its outcome. */
  private lifecycle: Promise<void> = Promise.resolve()
  /** Set while a load runs: requests that arrive meanwhile wait for the model it brings. */
  private swapping: Promise<void> | null = null
  private waitingForSwap = 0
  private closed = false
  /** Tokenizes the texts too large for the event loop, for every model this engine loads. */
  private readonly tokenizerThread = new TokenizerThread()

  constructor (deps: LocalEngineDeps, options: LocalEngineOptions = {}) {
    this.log = deps.log ?? SILENT_LOGGER
    this.accelerator = deps.accelerator ?? Accelerator.cpu()
    this.threads = integerOption('threads', options.threads ?? defaultInferenceThreads(availableParallelism()), 1)
    this.slotCount = integerOption('slots', options.slots ?? DEFAULT_SLOTS, 1)
    this.queueSize = integerOption('queueSize', options.queueSize ?? DEFAULT_QUEUE_SIZE, 0)
    this.contextSize = integerOption('contextSize', options.contextSize ?? DEFAULT_CONTEXT_SIZE, 1)
    this.flashAttention = options.flashAttention ?? 'auto'
    if (!FLASH_ATTENTION_CHOICES.includes(this.flashAttention)) {
      throw new RangeError(`LocalEngine option flashAttention must be one of ${FLASH_ATTENTION_CHOICES.join(', ')}, got ${String(this.flashAttention)}`)
    }
  }

  /**
   * Loads a GGUF file and makes it the model every request uses; loading the model already loaded from the same file
   * does nothing and resolves with its info (the same object). A model already loaded is unloaded first, so two
   * models never share this machine's memory: its generations are aborted (see `unload`), or with `whenIdle`
   * allowed to finish. Requests that arrive during the load wait for it. A file that is missing or not GGUF is
   * refused before anything changes; if the new model fails later, no model is loaded.
   */
  async load (modelID: string, path: string, options: LoadOptions = {}): Promise<LoadedModelInfo> {
    const step = this.serially(async () => {
      if (this.closed) throw new ModelLoadError(modelID, 'the engine is closed')
      // The model already loaded, from the same file (the engine's settings are fixed): nothing to change, and the
      // generations running on it go on
      if (this.active?.info.modelID === modelID && this.active.info.path === path) return this.active.info
      // A missing or non-GGUF file is refused while the current model still serves
      const { sizeBytes, headSize } = await inspectModelFile(modelID, path)
      if (options.whenIdle === true && this.active != null) await idle(this.active)
      await this.unloadActive(`replaced by ${modelID}`)
      // Three memory-reducing collections (heap.ts) keep what loading leaves behind from raising the process's peak: the
      // model just unloaded (at start: every module's loading), the GGUF parsed with its tensors, the chat template.
      compactHeap()
      const started = performance.now()
      const llama = await this.accelerator.llama(this.threads)
      // The model's default reaches every context made from it: the generation context and the embedding one (which
      // takes no setting of its own), so it is chosen before the load, by the build: a GPU build that ends up placing
      // no layer on the GPU keeps llama.cpp's auto.
      const flashAttention = resolveFlashAttention(this.flashAttention, headSize, llama.gpu === false)
      let model: LlamaModel
      try {
        model = await llama.loadModel({ modelPath: path, defaultContextFlashAttention: flashAttention })
      } catch (err) {
        // node-llama-cpp rejects a file that is not GGUF, is truncated, or has an architecture llama.cpp lacks
        throw new ModelLoadError(modelID, `${path} is not a loadable GGUF model (${errorMessage(err)})`, { cause: err })
      }
      releaseTokenizerArrays(model)
      compactHeap() // before the context allocates its KV cache and compute buffers
      try {
        this.active = await this.activate(modelID, path, sizeBytes, llama, model)
      } catch (err) {
        await model.dispose()
        throw new ModelLoadError(modelID, `cannot create a context (${errorMessage(err)})`, { cause: err })
      }
      const loadMs = Math.round(performance.now() - started)
      compactHeap() // and what resolving the chat template left
      this.log.info({ ...this.active.info, flashAttention, loadMs }, 'model loaded')
      return this.active.info
    })
    // From now until the load is done, new requests wait for the model it brings instead of being admitted on the
    // one it replaces (which would keep a swap waiting for them).
    const settled = step.then(() => undefined, () => undefined)
    this.swapping = settled
    try {
      return await step
    } finally {
      if (this.swapping === settled) this.swapping = null
    }
  }

  /**
   * Unloads the model. Generations still running are aborted (they stop within a token; their iterators throw
   * NoModelLoadedError) and queued ones are refused the same way: waiting for them could take minutes, and a caller
   * who unloads wants the memory back.
   */
  async unload (): Promise<void> {
    await this.serially(async () => {
      await this.unloadActive('unloaded')
      compactHeap()
    })
  }

  /** Unloads the model and refuses later loads. The process's shared Llama stays: other engines may use it. */
  async close (): Promise<void> {
    this.closed = true
    await this.serially(async () => { await this.unloadActive('unloaded: the engine is closing') })
    this.tokenizerThread.close()
  }

  loaded (): LoadedModelInfo | null {
    return this.active?.info ?? null
  }

  stats (): EngineStats {
    const active = this.active
    return {
      slots: active?.pool.size ?? this.slotCount,
      busySlots: active?.pool.busy ?? 0,
      queued: (active?.pool.queued ?? 0) + (active?.embedder.queued ?? 0) + this.waitingForSwap
    }
  }

  /**
   * Streams the answer to a chat: `delta` events as tokens are generated (and `tool_call` / `tool_arguments` when
   * the model calls a tool), then one `done` event.
   *
   * Failures before any event come from the first `next()`: InvalidGenerationRequestError, NoModelLoadedError,
   * QueueFullError (all slots busy and `queueSize` requests waiting). Aborting `signal`, while queued or running,
   * stops the generation and frees the slot for the next queued request; the iterator then throws `signal.reason`.
   * Leaving a `for await` early does the same without the throw. Either way the slot is free once the iterator has
   * finished, and it is freed even if the consumer stops pulling without ever returning.
   */
  async * generate (request: ChatRequest, options: GenerateOptions = {}): AsyncGenerator<ChatEvent, void, undefined> {
    yield * this.onSlot(options, async (parts) => await planChat(parts, request, options.signal))
  }

  /** Streams a text completion of `request.prompt`, with the same events, queue and abort rules as `generate`. */
  async * complete (request: CompletionRequest, options: GenerateOptions = {}): AsyncGenerator<CompletionEvent, void, undefined> {
    yield * this.onSlot(options, async (parts) => await planCompletion(parts, request, options.signal))
  }

  /** One `embedding` event per input, then `done`; refused, queued and aborted like a generation. */
  async * embed (request: EmbeddingRequest, options: GenerateOptions = {}): AsyncGenerator<EmbeddingEvent, void, undefined> {
    const { active, release } = await this.admit(options)
    try {
      yield * active.embedder.embed(request, AbortSignal.any([active.unloading.signal, ...(options.signal == null ? [] : [options.signal])]))
    } finally {
      release()
    }
  }

  /** Any request, by kind: what a peer asks for. */
  serve (request: InferenceRequest, options: GenerateOptions = {}): AsyncGenerator<InferenceEvent, void, undefined> {
    switch (request.kind) {
      case 'chat': return this.generate(request, options)
      case 'completion': return this.complete(request, options)
      case 'embeddings': return this.embed(request, options)
    }
  }

  /**
   * The model's tokens for `text` (plain text: markers typed in it are not special). `addSpecial` adds the BOS. A text
   * that could not fit one request is refused, as a prompt would be (prompt-tokens.ts).
   */
  async tokenize (text: string, options: { addSpecial?: boolean, modelID?: string, signal?: AbortSignal } = {}): Promise<number[]> {
    const { parts } = this.current(options.modelID)
    const tokens = await parts.prompt.tokenize(text, 'content', { what: 'content holds', signal: options.signal })
    const bos = parts.model.tokens.bos
    return options.addSpecial === true && bos != null ? [bos, ...tokens] : tokens
  }

  /** The tokens a chat's prompt takes on the loaded model (its template and tools included): what it is billed as input. */
  async countChatTokens (request: ChatRequest, options: { modelID?: string, signal?: AbortSignal } = {}): Promise<number> {
    const { parts } = this.current(options.modelID)
    return (await renderChat(parts, request, options.signal)).tokens.length
  }

  /** The text of `tokens`; ids outside the vocabulary are refused (llama.cpp would abort the process on them). */
  detokenize (tokens: readonly number[], options: { modelID?: string } = {}): string {
    const { parts } = this.current(options.modelID)
    checkTokenIDs(tokens, parts.model, 'tokens')
    return parts.model.detokenize(tokens as readonly Token[], false)
  }

  /** Plans `request` against the loaded model, runs it on a slot, and streams its events as they come. */
  private async * onSlot<E> (options: GenerateOptions, plan: (parts: ModelParts) => Promise<SlotWork<E>>): AsyncGenerator<E | DoneEvent, void, undefined> {
    const { signal } = options
    const requester = options.requester ?? anonymousRequester()
    const { active, release } = await this.admit(options)
    const events = new ChunkQueue<E>()
    const consumerLeft = new AbortController()
    let settled: Promise<void> | null = null
    let outcome: Promise<DoneEvent> | null = null
    try {
      const work = await plan(active.parts)
      const slot = await active.pool.acquire({ signal, choose: (free) => chooseSlot(free, requester, work.tokens) })
      if (active.unloading.signal.aborted) {
        // unloaded between the hand-over and now: the model may already be disposed
        active.pool.release(slot)
        throw active.unloading.signal.reason
      }
      const stopSignals = [consumerLeft.signal, active.unloading.signal, ...(signal == null ? [] : [signal])]
      const running = this.run(active, slot, requester, work, events, AbortSignal.any(stopSignals))
      outcome = running
      // The slot goes back when the generation settles, not when the consumer next pulls: a consumer stuck on a slow
      // socket must not hold a slot that queued requests wait for (nor keep a swap waiting).
      settled = running
        .then(() => { events.end() }, (err: unknown) => {
          forgetSlot(slot)
          events.fail(err)
        })
        .finally(() => {
          active.pool.release(slot)
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

  private async run<E> (active: ActiveModel, slot: Slot, requester: Requester, work: SlotWork<E>, events: ChunkQueue<E>, signal: AbortSignal): Promise<DoneEvent> {
    const started = performance.now()
    // The slot keeps what its last generation evaluated, and node-llama-cpp evaluates only the part of this prompt
    // that differs (a chat resending its history pays for the new turn, not the whole conversation). Only within one
    // requester: a slot holding anyone else's tokens is cleared first (slot-cache.ts).
    const cachedTokens = await prepareSlot(slot, requester, work.tokens)
    const done = await work.run(slot, (event) => { events.push(event) }, signal)
    const usage = { ...done.usage, cachedTokens }
    this.log.debug({ modelID: active.info.modelID, finishReason: done.finishReason, ...usage, ms: Math.round(performance.now() - started) }, 'generation finished')
    return { ...done, usage }
  }

  /**
   * Lets a request in: after a load in progress (it waits for the model that load brings, counted as queued), on the
   * model it was placed on. `release` must be called once the request has settled.
   */
  private async admit (options: GenerateOptions): Promise<{ active: ActiveModel, release: () => void }> {
    options.signal?.throwIfAborted()
    while (this.swapping != null) {
      if (this.waitingForSwap >= this.queueSize) throw new QueueFullError(this.queueSize, QUEUE_FULL_RETRY_AFTER_SECONDS)
      this.waitingForSwap++
      try {
        await abortable(this.swapping, options.signal)
      } finally {
        this.waitingForSwap--
      }
    }
    const active = this.current(options.modelID)
    active.admitted++
    let released = false
    return {
      active,
      release: () => {
        if (released) return
        released = true
        if (--active.admitted === 0) for (const wake of active.whenIdle.splice(0)) wake()
      }
    }
  }

  /** The loaded model, if it is the one asked for. */
  private current (modelID: string | undefined): ActiveModel {
    const active = this.active
    if (active == null) throw new NoModelLoadedError()
    if (modelID != null && modelID !== active.info.modelID) throw new ModelSwappedError(modelID, active.info.modelID)
    return active
  }

  private async activate (modelID: string, path: string, sizeBytes: number, llama: Llama, model: LlamaModel): Promise<ActiveModel> {
    const trainContextLength = model.trainContextSize
    const batching = new SequenceOrderedBatching()
    const context = await model.createContext({
      sequences: this.slotCount,
      contextSize: trainContextLength > 0 ? Math.min(this.contextSize, trainContextLength) : this.contextSize,
      threads: this.threads,
      batching: batching.options
    })
    batching.attach(context)
    const { resolveChatWrapper } = await llamaModule()
    const chatWrapper = resolveChatWrapper(model)
    const slots: Slot[] = []
    for (let i = 0; i < this.slotCount; i++) slots.push({ sequence: context.getSequence(), owner: null, lastUsed: 0 })
    const info: LoadedModelInfo = Object.freeze({
      modelID,
      path,
      sizeBytes,
      contextLength: context.contextSize,
      trainContextLength,
      slots: this.slotCount,
      chatTemplate: chatWrapper.wrapperName,
      embeddingLength: model.embeddingVectorSize,
      backend: model.gpuLayers > 0 ? (this.accelerator.backend() ?? 'cpu') : 'cpu',
      gpuLayers: model.gpuLayers,
      totalLayers: model.fileInsights.totalLayers
    })
    const pool = new SlotPool(slots, { queueSize: this.queueSize, retryAfterSeconds: QUEUE_FULL_RETRY_AFTER_SECONDS })
    const prompt = new PromptTokenizer({ thread: this.tokenizerThread, modelID, path, model, contextLength: context.contextSize })
    const embedder = new Embedder(model, prompt, {
      contextSize: context.contextSize, threads: this.threads, queueSize: this.queueSize, retryAfterSeconds: QUEUE_FULL_RETRY_AFTER_SECONDS
    })
    const parts: ModelParts = { modelID, contextLength: context.contextSize, llama, model, chatWrapper, prompt }
    return { info, parts, model, context, pool, embedder, unloading: new AbortController(), admitted: 0, whenIdle: [] }
  }

  private async unloadActive (how: string): Promise<void> {
    const active = this.active
    if (active == null) return
    this.active = null // from here generate() sees no model
    const gone = new NoModelLoadedError(`Model ${active.info.modelID} was ${how}`)
    active.unloading.abort(gone)
    active.pool.close(gone)
    await idle(active)
    await active.embedder.dispose(gone)
    await active.context.dispose()
    await active.model.dispose()
    this.log.info({ modelID: active.info.modelID, how }, 'model unloaded')
  }

  private async serially<T> (step: () => Promise<T>): Promise<T> {
    const result = this.lifecycle.then(step)
    // The next step waits for this one whatever its outcome; this step's own caller gets the failure from `result`.
    this.lifecycle = result.then(() => undefined, () => undefined)
    return await result
  }
}

/** Resolves once no request admitted on `active` is left. */
async function idle (active: ActiveModel): Promise<void> {
  if (active.admitted === 0) return
  await new Promise<void>((resolve) => { active.whenIdle.push(resolve) })
}

async function abortable (promise: Promise<void>, signal: AbortSignal | undefined): Promise<void> {
  if (signal == null) return await promise
  signal.throwIfAborted()
  let onAbort: (() => void) | undefined
  try {
    await Promise.race([promise, new Promise<never>((_resolve, reject) => {
      onAbort = () => { reject(signal.reason) }
      signal.addEventListener('abort', onAbort, { once: true })
    })])
  } finally {
    if (onAbort != null) signal.removeEventListener('abort', onAbort)
  }
}

function integerOption (name: string, value: number, min: number): number {
  if (!Number.isSafeInteger(value) || value < min) throw new RangeError(`LocalEngine option ${name} must be an integer >= ${min}, got ${value}`)
  return value
}

/** The file's size, and the width of its attention heads (null when its GGUF does not say). */
async function inspectModelFile (modelID: string, path: string): Promise<{ sizeBytes: number, headSize: number | null }> {
  let sizeBytes: number
  try {
    sizeBytes = (await stat(path)).size
  } catch (err) {
    // ENOENT or EACCES: say which file, instead of node-llama-cpp's less direct failure later
    throw new ModelLoadError(modelID, `cannot read ${path} (${errorMessage(err)})`, { cause: err })
  }
  let info: GgufFileInfo
  try {
    // metadata only; 'filesystem' so a path that looks like a URL is never fetched
    const { readGgufFileInfo } = await llamaModule()
    info = await readGgufFileInfo(path, { sourceType: 'filesystem', readTensorInfo: false, logWarnings: false })
  } catch (err) {
    // a wrong magic, an unsupported GGUF version or a truncated header
    throw new ModelLoadError(modelID, `${path} is not a GGUF file (${errorMessage(err)})`, { cause: err })
  }
  // As node-llama-cpp's GgufInsights reads it: key_length, else embedding_length / head_count; flash attention walks
  // the values as well as the keys, so the narrower of the two
  const architecture = info.architectureMetadata as { embedding_length?: number, attention?: { head_count?: unknown, key_length?: number, value_length?: number } } | undefined
  const heads = architecture?.attention?.head_count
  const byHeads = architecture?.embedding_length != null && typeof heads === 'number' && heads > 0 ? architecture.embedding_length / heads : null
  const keys = architecture?.attention?.key_length ?? byHeads
  const values = architecture?.attention?.value_length ?? keys
  const headSize = keys == null || values == null ? null : Math.min(keys, values)
  return { sizeBytes, headSize: headSize != null && Number.isSafeInteger(headSize) ? headSize : null }
}

/** What node-llama-cpp's copy of a GGUF's tokenizer may lose once the model is loaded (`releaseTokenizerArrays`). */
export const RELEASED_TOKENIZER_KEYS = ['merges', 'scores', 'token_type', 'precompiled_charsmap'] as const

/**
 * node-llama-cpp keeps the GGUF's whole metadata as the model's `fileInfo`, the tokenizer's arrays included, though
 * llama.cpp holds the vocabulary itself. For a vocabulary of 152k tokens with as many BPE merges (Qwen2.5's) that is
 * 15 MB of JavaScript strings and numbers for the life of the model, measured. Once the model is loaded,
 * node-llama-cpp 3.22 reads, of the tokenizer's arrays, only the number of tokens (`tokens.length`, as
 * `vocabularySize` does; its scalar keys, the end token and the chat template, stay), so the merges, scores, token
 * types and SentencePiece's character map are let go: 9 of the 15 MB. The tokens stay. node-llama-cpp's types still
 * declare them: code of ours that wants them must read the GGUF itself.
 */
function releaseTokenizerArrays (model: LlamaModel): void {
  const ggml = (model.fileInfo.metadata as { tokenizer?: { ggml?: object } }).tokenizer?.ggml
  if (ggml == null) return
  for (const key of RELEASED_TOKENIZER_KEYS) Reflect.deleteProperty(ggml, key)
}

function errorMessage (err: unknown): string {
  return err instanceof Error ? err.message : String(err)
}
