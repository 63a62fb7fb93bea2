// The local engine: the set of models in memory. It loads them (one load at a time, each refused before anything is
// touched when it cannot fit), evicts the least recently used idle one loaded for a request when a new one needs room
// (over `maxLoadedModels` or the memory budget), unloads those left idle past the keep-alive, and hands each request
// to the model it names (model-instance.ts), so that a request for one model never waits for another's.
import { EventEmitter } from 'node:events'
import { availableParallelism } from 'node:os'
import type { Llama, LlamaModel } from 'node-llama-cpp'
import type {
  ChatEngine, ChatEvent, ChatRequest, CompletionEvent, CompletionRequest, EmbeddingEvent, EmbeddingRequest,
  GenerateOptions, InferenceEvent, InferenceRequest
} from './chat.ts'
import { ModelLoadError, ModelSwappedError, ModelTooLargeError, NoModelLoadedError } from './errors.ts'
import { FLASH_ATTENTION_CHOICES, llamaFlashAttention, resolveFlashAttention, type FlashAttention } from './flash-attention.ts'
import { Accelerator } from './gpu.ts'
import { compactHeap } from './heap.ts'
import { defaultInferenceThreads } from './llama.ts'
import { availableMemoryBytes, contextLengthFor, errorMessage, estimateMemoryBytes, inspectModelFile } from './model-file.ts'
import { chatWrapperFor, ModelInstance, type InferenceLogger, type LoadedModelInfo, type LoadedModelState, type LoadReason } from './model-instance.ts'
import { releaseTokenizerArrays } from './patches/node-llama-cpp.ts'
import { PrefixStates } from './prefix-states.ts'
import {
  DEFAULT_CONTEXT_SIZE, DEFAULT_KEEP_ALIVE_MS, DEFAULT_MAX_LOADED_MODELS, DEFAULT_QUEUE_SIZE, DEFAULT_SLOTS, type EngineStats, type LoadOptions,
  type LocalEngineEvents, type LocalEngineOptions, type UnloadReason
} from './engine-options.ts'
import { PromptTokenizer, TokenizerThread } from './prompt-tokens.ts'

export type { InferenceLogger, LoadedModelInfo, LoadedModelState, LoadReason } from './model-instance.ts'
export { DEFAULT_CONTEXT_SIZE, DEFAULT_KEEP_ALIVE_MS, DEFAULT_MAX_LOADED_MODELS, DEFAULT_QUEUE_SIZE, DEFAULT_SLOTS } from './engine-options.ts'
export type { EngineStats, LoadOptions, LocalEngineEvents, LocalEngineOptions, UnloadReason } from './engine-options.ts'

export interface LocalEngineDeps {
  /** Default: silent. */
  log?: InferenceLogger
  /** The llama.cpp build models run on (CPU or a GPU backend). Default: the CPU. */
  accelerator?: Accelerator
}

// We have no service-time estimate worth more than this; a client retrying after a second finds a slot or asks again.
const QUEUE_FULL_RETRY_AFTER_SECONDS = 1

const SILENT_LOGGER: InferenceLogger = { debug: () => undefined, info: () => undefined, warn: () => undefined, error: () => undefined }

/**
 * Runs generations on local GGUF models with node-llama-cpp: chats (in each model's own chat template, with tools)
 * and text completions on a fixed number of slots per model, behind a bounded FIFO queue per model; embeddings on a
 * context of their own. Several models at once, within a count and a memory budget.
 */
export class LocalEngine extends EventEmitter<LocalEngineEvents> implements ChatEngine {
  private readonly log: InferenceLogger
  private readonly accelerator: Accelerator
  private readonly threads: number
  private readonly slotCount: number
  private readonly queueSize: number
  private readonly contextSize: number
  private readonly flashAttention: FlashAttention
  private readonly maxLoaded: number
  private readonly keepAliveMs: number
  /** Set on the first load when not given (`availableMemoryBytes`). */
  private budgetBytes: number | null
  private readonly budgetGiven: boolean
  private readonly models = new Map<string, ModelInstance>()
  private readonly keepAliveTimers = new Map<ModelInstance, NodeJS.Timeout>()
  /** Loads and unloads run one after another; each waits for the previous whatever its outcome. */
  private lifecycle: Promise<void> = Promise.resolve()
  private closed = false
  /** Tokenizes the texts too large for the event loop, for every model this engine loads. */
  private readonly tokenizerThread = new TokenizerThread()
  private readonly prefixStates: PrefixStates | null

  constructor (deps: LocalEngineDeps, options: LocalEngineOptions = {}) {
    super()
    this.log = deps.log ?? SILENT_LOGGER
    this.accelerator = deps.accelerator ?? Accelerator.cpu()
    this.threads = integerOption('threads', options.threads ?? defaultInferenceThreads(availableParallelism()), 1)
    this.slotCount = integerOption('slots', options.slots ?? DEFAULT_SLOTS, 1)
    this.queueSize = integerOption('queueSize', options.queueSize ?? DEFAULT_QUEUE_SIZE, 0)
    this.contextSize = integerOption('contextSize', options.contextSize ?? DEFAULT_CONTEXT_SIZE, 1)
    this.maxLoaded = integerOption('maxLoadedModels', options.maxLoadedModels ?? DEFAULT_MAX_LOADED_MODELS, 1)
    this.keepAliveMs = integerOption('keepAliveMs', options.keepAliveMs ?? DEFAULT_KEEP_ALIVE_MS, -1)
    this.budgetBytes = options.memoryBudgetBytes == null ? null : integerOption('memoryBudgetBytes', options.memoryBudgetBytes, 1)
    this.budgetGiven = this.budgetBytes != null
    this.flashAttention = options.flashAttention ?? 'auto'
    this.prefixStates = options.prefixStateDir == null
      ? null
      : new PrefixStates({ log: this.log }, { dir: options.prefixStateDir, budgetBytes: options.prefixStateBudgetBytes, minTokens: options.prefixStateMinTokens })
    if (!FLASH_ATTENTION_CHOICES.includes(this.flashAttention)) {
      throw new RangeError(`LocalEngine option flashAttention must be one of ${FLASH_ATTENTION_CHOICES.join(', ')}, got ${String(this.flashAttention)}`)
    }
  }

  /**
   * Loads a GGUF file beside the models already loaded; loading a model already loaded from the same file does
   * nothing and resolves with its info (the same object), an explicit load keeping it from eviction from then on.
   * Over the count or the memory budget, idle models loaded for requests are evicted, least recently used first
   * (explicit ones only when nothing else makes room); a model with requests in flight is never evicted: the load
   * waits for one to finish. A model that cannot fit even alone is refused with ModelTooLargeError, and a file that is
   * missing or not GGUF with ModelLoadError, before anything changes.
   */
  async load (modelID: string, path: string, options: LoadOptions = {}): Promise<LoadedModelInfo> {
    const reason = options.reason ?? 'explicit'
    return await this.serially(async () => {
      if (this.closed) throw new ModelLoadError(modelID, 'the engine is closed')
      const held = this.models.get(modelID)
      if (held != null && held.info.path === path) {
        if (reason === 'explicit') held.loadedBy = 'explicit'
        return held.info
      }
      if (held != null) await this.remove(held, 'explicit') // the same id, now another file
      const file = await inspectModelFile(modelID, path)
      const llama = await this.accelerator.llama(this.threads)
      const contextLength = contextLengthFor(file.trainContextLength, this.contextSize)
      const memoryBytes = await estimateMemoryBytes(file, llama, { contextLength, sequences: this.slotCount, gpuLayers: 0 })
      await this.makeRoom(modelID, memoryBytes, llama)
      // Memory-reducing collections (heap.ts) keep what loading leaves behind from raising the process's peak: a model
      // just unloaded, the GGUF parsed with its tensors, the chat template.
      compactHeap()
      const started = performance.now()
      // The model's default reaches the contexts made from it without a setting of their own: embeddings, which only
      // evaluate prompts. The generation context is made with what the choice means where the model runs, as the build
      // says: a GPU build that ends up placing no layer on the GPU keeps llama.cpp's auto.
      const flashAttention = resolveFlashAttention(this.flashAttention, llama.gpu === false)
      let model: LlamaModel
      try {
        model = await llama.loadModel({ modelPath: path, defaultContextFlashAttention: llamaFlashAttention(this.flashAttention) })
      } catch (err) {
        // node-llama-cpp rejects a file that is not GGUF, is truncated, or has an architecture llama.cpp lacks
        throw new ModelLoadError(modelID, `${path} is not a loadable GGUF model (${errorMessage(err)})`, { cause: err })
      }
      releaseTokenizerArrays(model)
      compactHeap()
      const instance = await this.instance(modelID, path, file.sizeBytes, file.kind, memoryBytes, llama, model, reason, flashAttention)
      this.models.set(modelID, instance)
      instance.onIdle = () => { this.scheduleKeepAlive(instance, true) }
      instance.onStats = () => { this.emit('stats') }
      this.scheduleKeepAlive(instance, false)
      this.log.info({ ...instance.info, loadedBy: reason, flashAttention, loadMs: Math.round(performance.now() - started) }, 'model loaded')
      this.emit('loaded', { info: instance.info, reason })
      return instance.info
    })
  }

  /**
   * Unloads one model, or every model when `modelID` is not given, once the requests in flight on it have finished;
   * requests that name it meanwhile find it gone (ModelSwappedError: the router loads it again for them). Resolves
   * with the ids unloaded.
   */
  async unload (modelID?: string): Promise<string[]> {
    return await this.serially(async () => {
      const gone = modelID == null ? [...this.models.values()] : [this.models.get(modelID)].filter((m) => m != null)
      await Promise.all(gone.map(async (instance) => { await this.remove(instance, 'explicit') }))
      compactHeap()
      return gone.map((instance) => instance.info.modelID)
    })
  }

  /** Unloads every model, aborting what runs on them, and refuses later loads. The process's shared Llama stays. */
  async close (): Promise<void> {
    this.closed = true
    for (const instance of this.models.values()) void instance.dispose(new NoModelLoadedError(`Model ${instance.info.modelID} was unloaded: the engine is closing`)).catch(() => undefined)
    await this.serially(async () => {
      await Promise.all([...this.models.values()].map(async (instance) => { await this.remove(instance, 'closing') }))
    })
    await this.prefixStates?.close()
    this.tokenizerThread.close()
  }

  /** The model `modelID` names, if it is loaded; without it, the one used most recently. */
  loaded (modelID?: string): LoadedModelInfo | null {
    return (modelID == null ? this.mostRecent() : this.models.get(modelID))?.info ?? null
  }

  /** Every loaded model, most recently used first. */
  loadedModels (): LoadedModelState[] {
    const now = Date.now()
    return [...this.models.values()].sort((a, b) => b.lastUsedAt - a.lastUsedAt).map((instance) => instance.state(now))
  }

  /** The slots and queues of every loaded model together (of the default slots when none is loaded). */
  stats (): EngineStats {
    if (this.models.size === 0) return { slots: this.slotCount, busySlots: 0, queued: 0 }
    let slots = 0
    let busySlots = 0
    let queued = 0
    for (const instance of this.models.values()) {
      slots += instance.info.kind === 'chat' ? instance.info.slots : 0
      busySlots += instance.busySlots
      queued += instance.queued
    }
    return { slots, busySlots, queued }
  }

  /**
   * Streams the answer to a chat on the model `options.modelID` names (the most recently used one when it names
   * none): `delta` events as tokens are generated (and `tool_call` / `tool_arguments` when the model calls a tool),
   * then one `done` event.
   *
   * Failures before any event come from the first `next()`: InvalidGenerationRequestError, NoModelLoadedError,
   * ModelSwappedError (the model named is not loaded), QueueFullError (all its slots busy and `queueSize` requests
   * waiting). Aborting `signal`, while queued or running, stops the generation and frees the slot for the next queued
   * request; the iterator then throws `signal.reason`. Leaving a `for await` early does the same without the throw.
   */
  async * generate (request: ChatRequest, options: GenerateOptions = {}): AsyncGenerator<ChatEvent, void, undefined> {
    yield * this.find(options.modelID).generate(request, options)
  }

  /** Streams a text completion of `request.prompt`, with the same events, queue and abort rules as `generate`. */
  async * complete (request: CompletionRequest, options: GenerateOptions = {}): AsyncGenerator<CompletionEvent, void, undefined> {
    yield * this.find(options.modelID).complete(request, options)
  }

  /** One `embedding` event per input, then `done`; refused, queued and aborted like a generation. */
  async * embed (request: EmbeddingRequest, options: GenerateOptions = {}): AsyncGenerator<EmbeddingEvent, void, undefined> {
    yield * this.find(options.modelID).embed(request, options)
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
    return await this.find(options.modelID).tokenize(text, options)
  }

  /** The tokens a chat's prompt takes on the model (its template and tools included): what it is billed as input. */
  async countChatTokens (request: ChatRequest, options: { modelID?: string, signal?: AbortSignal } = {}): Promise<number> {
    return await this.find(options.modelID).countChatTokens(request, options.signal)
  }

  /** The text of `tokens`; ids outside the vocabulary are refused (llama.cpp would abort the process on them). */
  detokenize (tokens: readonly number[], options: { modelID?: string } = {}): string {
    return this.find(options.modelID).detokenize(tokens)
  }

  private mostRecent (): ModelInstance | null {
    let newest: ModelInstance | null = null
    for (const instance of this.models.values()) if (newest == null || instance.lastUsedAt >= newest.lastUsedAt) newest = instance
    return newest
  }

  /** The loaded model `modelID` names, or the most recently used one. */
  private find (modelID: string | undefined): ModelInstance {
    if (modelID != null) {
      const instance = this.models.get(modelID)
      if (instance == null) throw new ModelSwappedError(modelID, this.models.size === 0 ? 'no model is loaded' : `loaded: ${[...this.models.keys()].join(', ')}`)
      return instance
    }
    const newest = this.mostRecent()
    if (newest == null) throw new NoModelLoadedError()
    return newest
  }

  /**
   * Frees room for a model of `needBytes`: refuses it when it could not fit even alone, else evicts idle models until
   * both the count and the budget allow it, waiting for a busy one to finish when no idle one can go.
   */
  private async makeRoom (modelID: string, needBytes: number, llama: Llama): Promise<void> {
    const budget = this.budgetBytes ??= await availableMemoryBytes(llama)
    if (needBytes > budget) throw new ModelTooLargeError(modelID, needBytes, budget, this.budgetGiven ? 'the memory budget' : 'available on this machine')
    for (;;) {
      const used = [...this.models.values()].reduce((sum, instance) => sum + instance.info.memoryBytes, 0)
      if (this.models.size < this.maxLoaded && used + needBytes <= budget) return
      const idle = [...this.models.values()].filter((instance) => !instance.busy).sort((a, b) => a.lastUsedAt - b.lastUsedAt)
      const victim = idle.find((instance) => instance.loadedBy === 'request') ?? idle[0]
      if (victim != null) {
        this.log.info({ modelID: victim.info.modelID, for: modelID }, 'evicting a model to make room')
        await this.remove(victim, 'evicted')
        continue
      }
      // Every loaded model has requests in flight: the first to finish them makes room
      await Promise.race([...this.models.values()].map(async (instance) => { await instance.idle() }))
    }
  }

  /** Takes a model out of the set (requests naming it from now on find it gone), waits for its requests, frees it. */
  private async remove (instance: ModelInstance, reason: UnloadReason): Promise<void> {
    const { modelID } = instance.info
    instance.onStats = null
    if (this.models.get(modelID) === instance) {
      this.models.delete(modelID)
      this.emit('stats') // its slots and queue no longer count
    }
    const timer = this.keepAliveTimers.get(instance)
    if (timer != null) clearTimeout(timer)
    this.keepAliveTimers.delete(instance)
    instance.onIdle = null
    await instance.idle()
    await instance.dispose(reason === 'closing'
      ? new NoModelLoadedError(`Model ${modelID} was unloaded: the engine is closing`)
      : new ModelSwappedError(modelID, `it was ${reason === 'explicit' ? 'unloaded' : reason === 'idle' ? 'unloaded after its keep-alive' : 'evicted'}`))
    this.log.info({ modelID, reason }, 'model unloaded')
    // The tokenizer thread serves the loaded models (prompt-tokens.ts): with none left, and none coming in its place, it ends.
    if (this.models.size === 0 && reason !== 'evicted') this.tokenizerThread.close()
    this.emit('unloaded', { modelID, reason })
  }

  /** A model loaded for a request leaves `keepAliveMs` after its last request settles (right after for 0; never for -1). */
  private scheduleKeepAlive (instance: ModelInstance, afterRequest: boolean): void {
    if (instance.loadedBy !== 'request' || this.keepAliveMs < 0 || instance.busy) return
    const previous = this.keepAliveTimers.get(instance)
    if (previous != null) clearTimeout(previous)
    const expire = (): void => {
      this.keepAliveTimers.delete(instance)
      void this.serially(async () => {
        const idleFor = Date.now() - instance.lastUsedAt
        if (this.models.get(instance.info.modelID) !== instance || instance.busy || instance.loadedBy !== 'request' || idleFor < this.keepAliveMs) return
        await this.remove(instance, 'idle')
        compactHeap()
      }).catch((err: unknown) => { this.log.error({ err, modelID: instance.info.modelID }, 'unloading an idle model failed') })
    }
    // 0: right after the request that settled, but not at load: the request it was loaded for has yet to come in
    if (this.keepAliveMs === 0) {
      if (afterRequest) expire()
      return
    }
    const timer = setTimeout(expire, this.keepAliveMs)
    timer.unref()
    this.keepAliveTimers.set(instance, timer)
  }

  private async instance (modelID: string, path: string, sizeBytes: number, kind: LoadedModelInfo['kind'], memoryBytes: number, llama: Llama, model: LlamaModel, reason: LoadReason, flashAttention: boolean | 'auto'): Promise<ModelInstance> {
    try {
      const contextLength = contextLengthFor(model.trainContextSize, this.contextSize)
      const chatWrapper = await chatWrapperFor(model)
      const info: LoadedModelInfo = Object.freeze({
        modelID,
        path,
        sizeBytes,
        kind,
        memoryBytes,
        contextLength,
        trainContextLength: model.trainContextSize,
        slots: kind === 'chat' ? this.slotCount : 0,
        chatTemplate: chatWrapper.wrapperName,
        embeddingLength: model.embeddingVectorSize,
        backend: model.gpuLayers > 0 ? (this.accelerator.backend() ?? 'cpu') : 'cpu',
        gpuLayers: model.gpuLayers,
        totalLayers: model.fileInsights.totalLayers
      })
      const prompt = new PromptTokenizer({ thread: this.tokenizerThread, modelID, path, model, contextLength })
      const prefixStates = kind === 'chat' ? await this.prefixStates?.keeperFor({ path, contextLength, sequences: this.slotCount, flashAttention }) ?? null : null
      return new ModelInstance(info, { modelID, contextLength, llama, model, chatWrapper, prompt }, reason, this.log, {
        threads: this.threads, slots: this.slotCount, queueSize: this.queueSize, retryAfterSeconds: QUEUE_FULL_RETRY_AFTER_SECONDS, flashAttention, prefixStates
      })
    } catch (err) {
      await model.dispose()
      throw new ModelLoadError(modelID, `cannot prepare it (${errorMessage(err)})`, { cause: err })
    }
  }

  private async serially<T> (step: () => Promise<T>): Promise<T> {
    const result = this.lifecycle.then(step)
    // The next step waits for this one whatever its outcome; this step's own caller gets the failure from `result`.
    this.lifecycle = result.then(() => undefined, () => undefined)
    return await result
  }
}

function integerOption (name: string, value: number, min: number): number {
  if (!Number.isSafeInteger(value) || value < min) throw new RangeError(`LocalEngine option ${name} must be an integer >= ${min}, got ${value}`)
  return value
}
