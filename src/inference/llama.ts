import type * as NodeLlamaCpp from 'node-llama-cpp'
import type { Llama } from 'node-llama-cpp'
import { letErasuresIn } from './batching.ts'

type LlamaModule = typeof NodeLlamaCpp
let module: Promise<LlamaModule> | null = null

/**
 * node-llama-cpp, imported on first use: the import alone costs ~300 ms and ~60 MB, which a node that serves no
 * model (or has not loaded one yet) should not pay at start.
 */
export async function llamaModule (): Promise<LlamaModule> {
  module ??= import('node-llama-cpp').then(async (loaded) => {
    guardSampling(loaded.LlamaContextSequence)
    letErasuresIn(loaded.LlamaContext, loaded.LlamaContextSequence)
    await boundNumberGrammar()
    return loaded
  })
  return await module
}

/**
 * The defect that could end the node: node-llama-cpp samples each sequence's next token inside its shared batch loop,
 * which it runs as an unowned promise (`void withLock(...)` in `LlamaContext.dispatchPendingBatch`). A sampler that
 * throws there (llama.cpp's "Failed to accept token in sampler: Unexpected empty grammar stack", reachable from a
 * grammar with a degenerate temperature) became an unhandled rejection that ended the process, and the generation
 * that caused it waited forever. We wrap the per-sequence decode so that a sampling failure is caught where it
 * happens, the batch loop carries on for the other sequences, and the failure is thrown from that sequence's own
 * `_decodeTokens` call, i.e. to the one generation that caused it. node-llama-cpp is pinned to an exact version; if
 * the private method changes shape we leave it alone rather than guess (`guardedSampling` says which happened).
 */
const GUARDED = Symbol.for('meshnode.guardedSampling')

function guardSampling (Sequence: LlamaModule['LlamaContextSequence']): void {
  const prototype = Sequence.prototype as unknown as Record<string | symbol, unknown>
  const original = prototype._decodeTokens
  // (tokens, logits, evaluationPriority, tokenMeter, contextShiftOptions, logitDataMapper, afterBatchAction)
  const MAPPER = 5
  if (typeof original !== 'function' || original.length !== 7 || prototype[GUARDED] === true) return
  prototype[GUARDED] = true
  prototype._decodeTokens = async function (this: unknown, ...args: unknown[]): Promise<unknown> {
    const mapper = args[MAPPER]
    let failure: { error: unknown } | null = null
    if (typeof mapper === 'function') {
      const fail = (error: unknown): number => {
        failure ??= { error }
        return -1   // node-llama-cpp's own "no token" value; we throw the real error below before anyone reads it
      }
      args[MAPPER] = (...mapperArgs: unknown[]): unknown => {
        try {
          const mapped: unknown = mapper(...mapperArgs)
          return mapped instanceof Promise ? mapped.catch(fail) : mapped
        } catch (error) {
          return fail(error)
        }
      }
    }
    const result: unknown = await (original as (...a: unknown[]) => Promise<unknown>).apply(this, args)
    if (failure != null) throw new SamplingError((failure as { error: unknown }).error)
    return result
  }
}


/**
 * node-llama-cpp's JSON grammar lets a number carry an exponent of up to 16 digits, for `integer` too: `5e-3` passes
 * as an integer and `1e9999` parses to Infinity. node-llama-cpp then rejects the function call it constrained
 * ("Expected type integer but got number") and the request failed; with response_format the text was simply
 * invalid against the caller's schema. We give integers no exponent and numbers an exponent of at most two digits,
 * so whatever the grammar admits parses to a finite value of the right type. The class is internal (no export), so
 * it is reached by its file, which is the module node-llama-cpp itself loaded; its grammar text is checked first,
 * and left alone if node-llama-cpp changed it.
 */
// At most 15 digits: every integer the grammar admits is a safe integer (below 2^53), so a schema bounded by the
// safe-integer range, as zod writes every integer's, is held by the grammar itself
const INTEGER_GRAMMAR = '"-"? ("0" | [1-9] [0-9]{0,14})'
const NUMBER_GRAMMAR = `${INTEGER_GRAMMAR} ("." [0-9]{1,16})? ([eE] [-+]? [0-9]{1,2})?`

async function boundNumberGrammar (): Promise<void> {
  const file = new URL('./utils/gbnfJson/terminals/GbnfNumber.js', import.meta.resolve('node-llama-cpp'))
  const { GbnfNumber } = await import(file.href) as { GbnfNumber: new (options: { allowFractional: boolean }) => { getGrammar (): string } }
  const prototype = GbnfNumber.prototype as unknown as Record<string | symbol, unknown> & { getGrammar (this: { allowFractional: boolean }): string }
  if (prototype[GUARDED] === true) return
  const known = '"-"? ("0" | [1-9] [0-9]{0,15}) ([eE] [-+]? ("0" | [1-9] [0-9]{0,15}))?'
  if (new GbnfNumber({ allowFractional: false }).getGrammar() !== known) return
  prototype[GUARDED] = true
  prototype.getGrammar = function (): string { return this.allowFractional ? NUMBER_GRAMMAR : INTEGER_GRAMMAR }
}

type TokenLike = NodeLlamaCpp.Token
type StopTrigger = ReadonlyArray<string | TokenLike>
interface TokenReleaseLock { dispose (): void }
interface QueuedTokenRelease { createTextIndexLock (index: number): TokenReleaseLock, createTokenIndexLock (index: number): TokenReleaseLock }
interface TriggeredStop { stopTrigger: StopTrigger }
/** The parts of node-llama-cpp that LlamaCompletion generates with and that its index does not export (token-loop.ts). */
export interface LlamaInternals {
  LlamaSampler: new (model: NodeLlamaCpp.LlamaModel) => { readonly _sampler: unknown, applyConfig (config: object): void, dispose (): void }
  StopGenerationDetector: {
    new (): {
      addStopTrigger (trigger: StopTrigger): void
      recordGeneration (generation: { text: string, tokens: TokenLike[], queuedTokenRelease: QueuedTokenRelease }): void
      readonly hasTriggeredStops: boolean
      getTriggeredStops (): TriggeredStop[]
    }
    resolveStopTriggers (triggers: ReadonlyArray<NodeLlamaCpp.LlamaText | string | StopTrigger>, tokenizer: NodeLlamaCpp.Tokenizer): StopTrigger[]
  }
  TokenStreamRegulator: new () => {
    addChunk (chunk: { tokens: TokenLike[], text: string }): QueuedTokenRelease
    popFreeChunkTokens (): TokenLike[]
    getPartiallyFreeChunk (tokenizer: NodeLlamaCpp.Tokenizer): { tokens: TokenLike[], text: string }
  }
  getQueuedTokensBeforeStopTrigger (triggered: TriggeredStop[], partiallyFree: { tokens: TokenLike[], text: string }, tokenizer: NodeLlamaCpp.Tokenizer): TokenLike[]
}
let internals: Promise<LlamaInternals | null> | null = null

/**
 * node-llama-cpp's internal modules, by their files in the pinned package (as `boundNumberGrammar` reaches its own);
 * null if any is missing or changed shape, and then generations run on LlamaChat and LlamaCompletion alone.
 */
export async function llamaInternals (): Promise<LlamaInternals | null> {
  internals ??= (async () => {
    await llamaModule() // the same module instances node-llama-cpp itself loaded
    const file = async (path: string): Promise<Record<string, unknown>> =>
      await import(new URL(path, import.meta.resolve('node-llama-cpp')).href) as Record<string, unknown>
    try {
      const [sampler, detector, regulator, before] = await Promise.all([
        file('./evaluator/LlamaContext/LlamaSampler.js'), file('./utils/StopGenerationDetector.js'),
        file('./utils/TokenStreamRegulator.js'), file('./utils/getQueuedTokensBeforeStopTrigger.js')
      ])
      const parts = {
        LlamaSampler: sampler.LlamaSampler,
        StopGenerationDetector: detector.StopGenerationDetector,
        TokenStreamRegulator: regulator.TokenStreamRegulator,
        getQueuedTokensBeforeStopTrigger: before.getQueuedTokensBeforeStopTrigger
      }
      return Object.values(parts).every((part) => typeof part === 'function') ? parts as LlamaInternals : null
    } catch {
      return null
    }
  })()
  return await internals
}

/** Whether node-llama-cpp's sampling is guarded (see `guardSampling`); false means its private API changed. */
export async function guardedSampling (): Promise<boolean> {
  const { LlamaContextSequence } = await llamaModule()
  return (LlamaContextSequence.prototype as unknown as Record<symbol, unknown>)[GUARDED] === true
}

/** llama.cpp failed to sample a token for one generation; that generation ends, the engine and the others go on. */
export class SamplingError extends Error {
  override name = 'SamplingError'
  constructor (cause: unknown) {
    super(`The engine failed to sample the next token: ${cause instanceof Error ? cause.message : String(cause)}`, { cause })
  }
}

// A module-level memo, which the code otherwise avoids, and why: node-llama-cpp binds one native llama.cpp backend per
// process. A second getLlama() would load the addon again with its own thread pool and log hooks, and models and
// grammars made by one Llama cannot be used with another (LlamaContext refuses a grammar "created with a different
// Llama instance"). So every LocalEngine in the process, and every test, shares one per backend (the CPU's, or a
// GPU's: see gpu.ts).
const shared = new Map<string, Promise<Llama>>()

/** The number of threads we give llama.cpp by default: leave one core to Node and the network, never more than 4. */
export function defaultInferenceThreads (cores: number): number {
  return Math.max(1, Math.min(4, cores - 1))
}

/**
 * The process's one Llama for `gpu` (false: the CPU build), never built from source. `threads` caps llama.cpp's
 * thread pool (`maxThreads`): node-llama-cpp's default oversubscribes a small machine and runs 10-500x slower. The
 * first caller creates it; a later caller asking for more threads raises the cap, never lowers it.
 */
export async function getSharedLlama (threads: number, gpu: 'cuda' | 'vulkan' | 'metal' | false = false): Promise<Llama> {
  const key = gpu === false ? 'cpu' : gpu
  let llama = shared.get(key)
  if (llama == null) {
    // Set before any await, so that concurrent first callers share one start
    llama = llamaModule().then(async ({ getLlama, LlamaLogLevel }) => await getLlama({
      gpu,
      build: 'never',
      usePrebuiltBinaries: true,
      maxThreads: threads,
      progressLogs: false,
      // warn would print llama.cpp's load chatter ("bad special token ...") for every model we open
      logLevel: LlamaLogLevel.error
    })).catch((err: unknown) => {
      shared.delete(key) // a failed start (no prebuilt binary) must not poison the memo: the next caller tries again
      throw err
    })
    shared.set(key, llama)
  }
  const ready = await llama
  if (ready.maxThreads < threads) ready.maxThreads = threads
  return ready
}
