import { randomInt } from 'node:crypto'
import { stat } from 'node:fs/promises'
import { availableParallelism } from 'node:os'
import type {
  LlamaChat,
  ChatHistoryItem, ChatWrapper, GbnfJsonSchema, Llama, LlamaContext, LlamaContextSequence, LlamaGrammar,
  LlamaModel, LLamaChatGenerateResponseOptions, Token
} from 'node-llama-cpp'
import { SequenceOrderedBatching } from './batching.ts'
import type { ChatEngine, ChatEvent, ChatMessage, ChatRequest, ChatUsage, FinishReason, GenerateOptions, ResponseFormat } from './chat.ts'
import { ChunkQueue } from './chunk-queue.ts'
import { InvalidGenerationRequestError, ModelLoadError, NoModelLoadedError } from './errors.ts'
import { toGrammarSchema } from './grammar-schema.ts'
import { defaultInferenceThreads, getSharedLlama, llamaModule } from './llama.ts'
import { SlotPool } from './slot-pool.ts'
import { anonymousRequester, chooseSlot, forgetSlot, prepareSlot, type CachedSlot } from './slot-cache.ts'

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
}

export interface LocalEngineOptions {
  /** llama.cpp threads. Default: `os.availableParallelism() - 1`, between 1 and 4 (more oversubscribes small machines). */
  threads?: number
  /** Generations that run in parallel, each on its own context sequence. Default 2. */
  slots?: number
  /** Requests that may wait for a slot; the next one gets QueueFullError. Default 16. */
  queueSize?: number
  /** Tokens one request may use, prompt and answer together. Default 2048, capped at the model's training context. */
  contextSize?: number
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
}

export interface EngineStats {
  slots: number
  busySlots: number
  queued: number
}

const DEFAULT_SLOTS = 2
const DEFAULT_QUEUE_SIZE = 16
const DEFAULT_CONTEXT_SIZE = 2048
const DEFAULT_TEMPERATURE = 1 // OpenAI's documented default; node-llama-cpp's own default (0) would be greedy
const MAX_STOP_STRINGS = 16
/**
 * Temperatures below this sample greedily. Logits divided by a temperature near 1e-38 overflow float32 to infinity,
 * the softmax turns to NaN and llama.cpp picks a token the grammar forbids (issue 14's crash request); a temperature
 * this small is greedy in all but name anyway.
 */
const GREEDY_BELOW_TEMPERATURE = 1e-3
const SEED_RANGE = 0xFFFFFFFF // seeds 0 .. 2^32 - 2; llama.cpp's LLAMA_DEFAULT_SEED (2^32 - 1) means "pick one at random"
// We have no service-time estimate worth more than this; a client retrying after a second finds a slot or asks again.
const QUEUE_FULL_RETRY_AFTER_SECONDS = 1

const SILENT_LOGGER: InferenceLogger = { debug: () => undefined, info: () => undefined, warn: () => undefined, error: () => undefined }

interface Slot extends CachedSlot {
  sequence: LlamaContextSequence
  chat: LlamaChat
}

interface ActiveModel {
  info: LoadedModelInfo
  llama: Llama
  model: LlamaModel
  context: LlamaContext
  chatWrapper: ChatWrapper
  slots: Slot[]
  pool: SlotPool<Slot>
  /** Aborted by unload: running generations stop, queued ones are refused. */
  unloading: AbortController
  /** One promise per admitted generation; settles (never rejects) once its slot is back in the pool. */
  running: Set<Promise<void>>
}

interface GenerationPlan {
  history: ChatHistoryItem[]
  /** The prompt as LlamaChat will evaluate it: what a slot's cached tokens are matched against. */
  tokens: Token[]
  promptTokens: number
  maxTokens: number
  grammar: LlamaGrammar | undefined
  sampling: Pick<LLamaChatGenerateResponseOptions, 'temperature' | 'topP' | 'topK' | 'seed' | 'repeatPenalty' | 'customStopTriggers'>
}

interface GenerationOutcome {
  finishReason: FinishReason
  usage: ChatUsage
}

/**
 * Runs chat generations on one local GGUF model with node-llama-cpp: a fixed number of slots (context sequences of
 * one context, decoded in shared batches), a bounded FIFO queue in front of them, the model's own chat template.
 */
export class LocalEngine implements ChatEngine {
  private readonly log: InferenceLogger
  private readonly threads: number
  private readonly slotCount: number
  private readonly queueSize: number
  private readonly contextSize: number
  private active: ActiveModel | null = null
  /** load/unload/close run one after another; each waits for the previous whatever its outcome. */
  private lifecycle: Promise<void> = Promise.resolve()
  private closed = false

  constructor (deps: LocalEngineDeps, options: LocalEngineOptions = {}) {
    this.log = deps.log ?? SILENT_LOGGER
    this.threads = integerOption('threads', options.threads ?? defaultInferenceThreads(availableParallelism()), 1)
    this.slotCount = integerOption('slots', options.slots ?? DEFAULT_SLOTS, 1)
    this.queueSize = integerOption('queueSize', options.queueSize ?? DEFAULT_QUEUE_SIZE, 0)
    this.contextSize = integerOption('contextSize', options.contextSize ?? DEFAULT_CONTEXT_SIZE, 1)
  }

  /**
   * Loads a GGUF file and makes it the model every generation uses. A model already loaded is unloaded first
   * (see `unload`: its running generations are aborted), so two models never share this machine's memory. A file
   * that is missing or not GGUF is refused before that; if the new model fails later, no model is loaded.
   */
  async load (modelID: string, path: string): Promise<LoadedModelInfo> {
    return await this.serially(async () => {
      if (this.closed) throw new ModelLoadError(modelID, 'the engine is closed')
      // A missing or non-GGUF file is refused while the current model still serves
      const sizeBytes = await inspectModelFile(modelID, path)
      await this.unloadActive(`replaced by ${modelID}`)
      const started = performance.now()
      const llama = await getSharedLlama(this.threads)
      let model: LlamaModel
      try {
        model = await llama.loadModel({ modelPath: path })
      } catch (err) {
        // node-llama-cpp rejects a file that is not GGUF, is truncated, or has an architecture llama.cpp lacks
        throw new ModelLoadError(modelID, `${path} is not a loadable GGUF model (${errorMessage(err)})`, { cause: err })
      }
      try {
        this.active = await this.activate(modelID, path, sizeBytes, llama, model)
      } catch (err) {
        await model.dispose()
        throw new ModelLoadError(modelID, `cannot create a context (${errorMessage(err)})`, { cause: err })
      }
      this.log.info({ ...this.active.info, loadMs: Math.round(performance.now() - started) }, 'model loaded')
      return this.active.info
    })
  }

  /**
   * Unloads the model. Generations still running are aborted (they stop within a token; their iterators throw
   * NoModelLoadedError) and queued ones are refused the same way: waiting for them could take minutes, and a caller
   * who unloads wants the memory back.
   */
  async unload (): Promise<void> {
    await this.serially(async () => { await this.unloadActive('unloaded') })
  }

  /** Unloads the model and refuses later loads. The process's shared Llama stays: other engines may use it. */
  async close (): Promise<void> {
    this.closed = true
    await this.serially(async () => { await this.unloadActive('unloaded: the engine is closing') })
  }

  loaded (): LoadedModelInfo | null {
    return this.active?.info ?? null
  }

  stats (): EngineStats {
    return {
      slots: this.active?.pool.size ?? this.slotCount,
      busySlots: this.active?.pool.busy ?? 0,
      queued: this.active?.pool.queued ?? 0
    }
  }

  /**
   * Streams the answer to a chat: `delta` events as tokens are generated, then one `done` event.
   *
   * Failures before any event come from the first `next()`: InvalidGenerationRequestError, NoModelLoadedError,
   * QueueFullError (all slots busy and `queueSize` requests waiting). Aborting `signal`, while queued or running,
   * stops the generation and frees the slot for the next queued request; the iterator then throws `signal.reason`.
   * Leaving a `for await` early does the same without the throw. Either way the slot is free once the iterator has
   * finished, and it is freed even if the consumer stops pulling without ever returning.
   */
  async * generate (request: ChatRequest, options: GenerateOptions = {}): AsyncGenerator<ChatEvent, void, undefined> {
    const { signal } = options
    const requester = options.requester ?? anonymousRequester()
    signal?.throwIfAborted()
    const active = this.active
    if (active == null) throw new NoModelLoadedError()
    const plan = await this.plan(active, request)
    const slot = await active.pool.acquire({ signal, choose: (free) => chooseSlot(free, requester, plan.tokens) })
    if (active.unloading.signal.aborted) {
      // unloaded between the hand-over and now: the model may already be disposed
      active.pool.release(slot)
      throw active.unloading.signal.reason
    }
    const consumerLeft = new AbortController()
    const chunks = new ChunkQueue<string>()
    const stopSignals = [consumerLeft.signal, active.unloading.signal, ...(signal == null ? [] : [signal])]
    const outcome = this.run(active, slot, requester, plan, chunks, AbortSignal.any(stopSignals))
    // The slot goes back when the generation settles, not when the consumer next pulls: a consumer stuck on a slow
    // socket must not hold a slot that queued requests wait for.
    const settled: Promise<void> = outcome
      .then(() => { chunks.end() }, (err: unknown) => {
        forgetSlot(slot)
        chunks.fail(err)
      })
      .finally(() => {
        active.running.delete(settled)
        active.pool.release(slot)
      })
    active.running.add(settled)
    try {
      for await (const text of chunks) yield { type: 'delta', text }
      yield { type: 'done', ...await outcome }
    } finally {
      consumerLeft.abort(new Error('The consumer stopped reading the generation')) // a no-op once it has finished
      await settled
    }
  }

  private async run (active: ActiveModel, slot: Slot, requester: string, plan: GenerationPlan, chunks: ChunkQueue<string>, signal: AbortSignal): Promise<GenerationOutcome> {
    const started = performance.now()
    // The slot keeps what its last generation evaluated, and LlamaChat evaluates only the part of this prompt that
    // differs (a chat resending its history pays for the new turn, not the whole conversation). Only within one
    // requester: a slot holding anyone else's tokens is cleared first (slot-cache.ts).
    const cachedTokens = await prepareSlot(slot, requester, plan.tokens)
    const meterBefore = slot.sequence.tokenMeter.getState()
    const result = await slot.chat.generateResponse(plan.history, {
      ...plan.sampling,
      maxTokens: plan.maxTokens,
      grammar: plan.grammar,
      onTextChunk: (text) => { if (text !== '') chunks.push(text) },
      signal,
      // Return what was generated instead of throwing, so an aborted generation's usage can still be recorded.
      stopOnAbortSignal: true
    })
    // One "output" token per sampling step: the logits of the prompt's last token, then of each generated token
    // but the last. So this counts exactly the tokens sampled, including stop-string and end-of-generation tokens.
    const completionTokens = slot.sequence.tokenMeter.diff(meterBefore).usedOutputTokens
    const usage: ChatUsage = { promptTokens: plan.promptTokens, completionTokens, totalTokens: plan.promptTokens + completionTokens, cachedTokens }
    const stopReason = result.metadata.stopReason
    this.log.debug({ modelID: active.info.modelID, stopReason, ...usage, ms: Math.round(performance.now() - started) }, 'generation finished')
    if (stopReason === 'abort') throw signal.reason
    return { finishReason: stopReason === 'maxTokens' ? 'length' : 'stop', usage }
  }

  /** Checks a request against the loaded model and turns it into node-llama-cpp's terms, before it takes a slot. */
  private async plan (active: ActiveModel, request: ChatRequest): Promise<GenerationPlan> {
    const history = toChatHistory(request.messages)
    const { contextLength, modelID } = active.info
    // Rendered exactly as LlamaChat renders a history it has no earlier evaluation of: with the model's turn opened.
    const rendered = active.chatWrapper.generateContextState({ chatHistory: withModelTurn(history) })
    const tokens = rendered.contextText.tokenize(active.model.tokenizer)
    const promptTokens = tokens.length
    // LlamaChat needs one free cell beyond the prompt, and then room for at least one token to sample.
    const room = contextLength - promptTokens
    if (room < 2) {
      throw new InvalidGenerationRequestError(
        `The messages take ${promptTokens} tokens; model ${modelID} has room for ${contextLength - 2} per request`, 'messages')
    }
    const maxTokens = optionalNumber(request.maxTokens, 'maxTokens', { min: 1, integer: true })
    const askedTemperature = optionalNumber(request.temperature, 'temperature', { min: 0, max: 2 }) ?? DEFAULT_TEMPERATURE
    const temperature = askedTemperature < GREEDY_BELOW_TEMPERATURE ? 0 : askedTemperature
    const presencePenalty = optionalNumber(request.presencePenalty, 'presencePenalty', { min: -2, max: 2 }) ?? 0
    const frequencyPenalty = optionalNumber(request.frequencyPenalty, 'frequencyPenalty', { min: -2, max: 2 }) ?? 0
    const seed = optionalNumber(request.seed, 'seed', { integer: true })
    // Capped, not refused: a client asking for 4096 tokens from a 2048-token context gets finish_reason "length".
    const resolvedMaxTokens = Math.min(maxTokens ?? room, room)
    return {
      history,
      tokens,
      promptTokens,
      maxTokens: resolvedMaxTokens,
      grammar: await grammarFor(active.llama, request.responseFormat),
      sampling: {
        temperature,
        topP: optionalNumber(request.topP, 'topP', { min: 0, max: 1 }) ?? 1,
        topK: optionalNumber(request.topK, 'topK', { min: 0, integer: true }) ?? 0, // 0: all tokens, as in OpenAI's API
        // node-llama-cpp seeds from the clock in whole seconds, so two requests in the same second would sample
        // alike. llama.cpp takes a uint32 and reads 0xFFFFFFFF as "random", so any integer maps below that.
        seed: seed == null ? randomInt(SEED_RANGE) : ((seed % SEED_RANGE) + SEED_RANGE) % SEED_RANGE,
        repeatPenalty: presencePenalty === 0 && frequencyPenalty === 0
          ? false // node-llama-cpp would otherwise apply its own 1.1 repeat penalty, which OpenAI's API does not have
          : { penalty: 1, presencePenalty, frequencyPenalty, lastTokens: resolvedMaxTokens, penalizeNewLine: true },
        customStopTriggers: stopStrings(request.stop)
      }
    }
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
    const { LlamaChat, resolveChatWrapper } = await llamaModule()
    const chatWrapper = resolveChatWrapper(model)
    const slots: Slot[] = []
    for (let i = 0; i < this.slotCount; i++) {
      const sequence = context.getSequence()
      slots.push({ sequence, chat: new LlamaChat({ contextSequence: sequence, chatWrapper }), owner: null, lastUsed: 0 })
    }
    const info: LoadedModelInfo = Object.freeze({
      modelID,
      path,
      sizeBytes,
      contextLength: context.contextSize,
      trainContextLength,
      slots: this.slotCount,
      chatTemplate: chatWrapper.wrapperName
    })
    const pool = new SlotPool(slots, { queueSize: this.queueSize, retryAfterSeconds: QUEUE_FULL_RETRY_AFTER_SECONDS })
    return { info, llama, model, context, chatWrapper, slots, pool, unloading: new AbortController(), running: new Set() }
  }

  private async unloadActive (how: string): Promise<void> {
    const active = this.active
    if (active == null) return
    this.active = null // from here generate() sees no model
    const gone = new NoModelLoadedError(`Model ${active.info.modelID} was ${how}`)
    active.unloading.abort(gone)
    active.pool.close(gone)
    await Promise.all(active.running)
    for (const slot of active.slots) slot.chat.dispose()
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

function toChatHistory (messages: readonly ChatMessage[]): ChatHistoryItem[] {
  if (!Array.isArray(messages) || messages.length === 0) {
    throw new InvalidGenerationRequestError('messages must hold at least one message', 'messages')
  }
  return messages.map((message, i): ChatHistoryItem => {
    if (typeof message?.content !== 'string') throw new InvalidGenerationRequestError(`messages[${i}].content must be a string`, `messages[${i}].content`)
    // Message text stays plain text: node-llama-cpp only emits special tokens for the template's own markers, so
    // "<|im_end|>" typed by a user cannot close a turn.
    switch (message.role) {
      case 'system': return { type: 'system', text: message.content }
      case 'user': return { type: 'user', text: message.content }
      case 'assistant': return { type: 'model', response: [message.content] }
      default: throw new InvalidGenerationRequestError(`messages[${i}].role must be system, user or assistant`, `messages[${i}].role`)
    }
  })
}

/** A history ending in a user turn gets an empty model turn to answer in; one ending in a model turn is continued. */
function withModelTurn (history: ChatHistoryItem[]): ChatHistoryItem[] {
  return history.at(-1)?.type === 'model' ? history : [...history, { type: 'model', response: [] }]
}

async function grammarFor (llama: Llama, format: ResponseFormat | null | undefined): Promise<LlamaGrammar | undefined> {
  if (format == null || format.type === 'text') return undefined
  if (format.type === 'json_object') return await llama.getGrammarFor('json')
  if (format.type === 'json_schema') {
    return await llama.createGrammarForJsonSchema<GbnfJsonSchema>(toGrammarSchema(format.schema, 'responseFormat.schema'))
  }
  throw new InvalidGenerationRequestError('responseFormat.type must be text, json_object or json_schema', 'responseFormat.type')
}

function stopStrings (stop: string[] | null | undefined): string[] | undefined {
  if (stop == null) return undefined
  if (!Array.isArray(stop) || stop.length > MAX_STOP_STRINGS || !stop.every((s) => typeof s === 'string' && s !== '')) {
    throw new InvalidGenerationRequestError(`stop must be at most ${MAX_STOP_STRINGS} non-empty strings`, 'stop')
  }
  return stop
}

function optionalNumber (value: number | null | undefined, param: string, range: { min?: number, max?: number, integer?: boolean }): number | undefined {
  if (value == null) return undefined
  const ok = typeof value === 'number' && Number.isFinite(value) &&
    (range.integer !== true || Number.isSafeInteger(value)) &&
    (range.min === undefined || value >= range.min) && (range.max === undefined || value <= range.max)
  if (!ok) {
    const bounds = [range.min !== undefined ? `>= ${range.min}` : '', range.max !== undefined ? `<= ${range.max}` : ''].filter(Boolean).join(' and ')
    throw new InvalidGenerationRequestError(`${param} must be ${range.integer === true ? 'an integer' : 'a number'}${bounds === '' ? '' : ' ' + bounds}`, param)
  }
  return value
}

function integerOption (name: string, value: number, min: number): number {
  if (!Number.isSafeInteger(value) || value < min) throw new RangeError(`LocalEngine option ${name} must be an integer >= ${min}, got ${value}`)
  return value
}

async function inspectModelFile (modelID: string, path: string): Promise<number> {
  let sizeBytes: number
  try {
    sizeBytes = (await stat(path)).size
  } catch (err) {
    // ENOENT or EACCES: say which file, instead of node-llama-cpp's less direct failure later
    throw new ModelLoadError(modelID, `cannot read ${path} (${errorMessage(err)})`, { cause: err })
  }
  try {
    // metadata only; 'filesystem' so a path that looks like a URL is never fetched
    const { readGgufFileInfo } = await llamaModule()
    await readGgufFileInfo(path, { sourceType: 'filesystem', readTensorInfo: false, logWarnings: false })
  } catch (err) {
    // a wrong magic, an unsupported GGUF version or a truncated header
    throw new ModelLoadError(modelID, `${path} is not a GGUF file (${errorMessage(err)})`, { cause: err })
  }
  return sizeBytes
}

function errorMessage (err: unknown): string {
  return err instanceof Error ? err.message : String(err)
}
