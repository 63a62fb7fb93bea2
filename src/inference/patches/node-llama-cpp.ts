// Over 400 lines on purpose: one module per patched dependency, so that an upgrade of node-llama-cpp is checked in one
// file; each patch below stands alone.
// Every patch meshnode makes to node-llama-cpp's private internals, and every private part it drives, in one place:
// each is applied (or checked) once, when node-llama-cpp is first imported, and says whether it took
// (`nodeLlamaCppPatches`). A patch checks the exact shape it was written for (a method's parameter list, a class
// field, a grammar's text) and, finding another, leaves node-llama-cpp alone and reports what it found: the node warns
// at start (gpu.ts, `Accelerator`), and its test (test/inference/patches.test.ts) fails. docs/UPGRADING.md lists each
// patch, what it touches, why, and its check. Callers use what this file exports, never the private fields themselves.
import { readFileSync } from 'node:fs'
import { registerHooks } from 'node:module'
import { fileURLToPath } from 'node:url'
import type * as NodeLlamaCpp from 'node-llama-cpp'
import type { LlamaContext, LlamaContextSequence, LlamaModel, LlamaText, Token, Tokenizer } from 'node-llama-cpp'
import type { PatchReport } from './report.ts'

export type LlamaModule = typeof NodeLlamaCpp

// ---------------------------------------------------------------------------------------------------------------------
// Reading the shape of what is patched

/** Set on a wrapper we install: the method it wraps, so that a check reads the dependency's own parameter list. */
const ORIGINAL = Symbol.for('meshnode.patchedOriginal')

type Prototype = Record<string | symbol, unknown>

function prototypeOf (Class: { prototype: object }): Prototype {
  return Class.prototype as Prototype
}

/** `method`'s parameter list as written, whitespace collapsed: `(tokens, logits, …)`; null when it is no function. */
function parameterList (method: unknown): string | null {
  if (typeof method !== 'function') return null
  const own = (method as unknown as Prototype)[ORIGINAL] ?? method
  const source = Function.prototype.toString.call(own)
  const start = source.indexOf('(')
  if (start < 0) return null
  let depth = 0
  for (let i = start; i < source.length; i++) {
    const c = source[i]
    if (c === '(' || c === '{' || c === '[') depth++
    else if (c === ')' || c === '}' || c === ']') {
      if (--depth === 0) return source.slice(start, i + 1).replace(/\s+/g, ' ')
    }
  }
  return null
}

/** The fields of `fields` that `Class` does not declare (a class field is in the class's source: `_context;`). */
function undeclaredFields (Class: object, fields: readonly string[]): string[] {
  const source = Function.prototype.toString.call(Class)
  return fields.filter((field) => !new RegExp(`(?:^|[\\s;{}/])${field}\\s*[;=]`, 'm').test(source))
}

/** What differs between a method's parameter list and the one a patch was written for; null when they match. */
function signatureProblem (owner: string, method: string, found: unknown, expected: string): string | null {
  const list = parameterList(found)
  if (list == null) return `${owner}.${method} is gone`
  return list === expected ? null : `${owner}.${method} now takes ${list}, not ${expected}`
}

/** A file of the installed node-llama-cpp, by its path in the package (the module it loaded itself, when imported). */
function packageFile (path: string): URL {
  return new URL(path, import.meta.resolve('node-llama-cpp'))
}

// ---------------------------------------------------------------------------------------------------------------------
// sampling-guard

/** llama.cpp failed to sample a token for one generation; that generation ends, the engine and the others go on. */
export class SamplingError extends Error {
  override name = 'SamplingError'
  constructor (cause: unknown) {
    super(`The engine failed to sample the next token: ${cause instanceof Error ? cause.message : String(cause)}`, { cause })
  }
}

const SEQUENCE_DECODE = '(tokens, logits, evaluationPriority, tokenMeter, contextShiftOptions, logitDataMapper, afterBatchAction)'
/** Where the logit data mapper (the per-token sampling) is in SEQUENCE_DECODE. */
const MAPPER = 5
const GUARDED = Symbol.for('meshnode.guardedSampling')

/**
 * The defect that could end the node: node-llama-cpp samples each sequence's next token inside its shared batch loop,
 * which it runs as an unowned promise (`void withLock(...)` in `LlamaContext.dispatchPendingBatch`). A sampler that
 * throws there (llama.cpp's "Failed to accept token in sampler: Unexpected empty grammar stack", reachable from a
 * grammar with a degenerate temperature) became an unhandled rejection that ended the process, and the generation
 * that caused it waited forever. `LlamaContextSequence._decodeTokens` is wrapped so that a sampling failure is caught
 * where it happens, the batch loop carries on for the other sequences, and the failure is thrown from that sequence's
 * own `_decodeTokens` call, i.e. to the one generation that caused it.
 */
function guardSampling (Sequence: LlamaModule['LlamaContextSequence']): string | null {
  const prototype = prototypeOf(Sequence)
  if (prototype[GUARDED] === true) return null
  const original = prototype._decodeTokens
  const problem = signatureProblem('LlamaContextSequence', '_decodeTokens', original, SEQUENCE_DECODE)
  if (problem != null) return problem
  prototype[GUARDED] = true
  const guarded = async function (this: unknown, ...args: unknown[]): Promise<unknown> {
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
  Object.defineProperty(guarded, ORIGINAL, { value: original })
  prototype._decodeTokens = guarded
  return null
}

// ---------------------------------------------------------------------------------------------------------------------
// erasures-take-the-lock

const CONTEXT_DECODE = '({ sequenceId, firstTokenSequenceIndex, tokens, logits, evaluationPriority = defaultEvaluationPriority, tokenMeter, afterBatchAction }, logitDataMapper)'
const ERASE = '(ranges, { canResetTokenPredictor = true, canRemovePredictionTokens = true, skipLock = false, avoidEvaluation = false } = {})'
const ERASURES = Symbol.for('meshnode.erasuresGetTheLock')

interface ErasureState {
  /** Sequence id → erasures of that sequence under way. */
  pending: Map<number, number>
  /** Decodes of other sequences waiting for the erasures to be through. */
  waiting: Array<() => void>
}

/**
 * Lets a sequence's erasure (clearing it, or LlamaChat trimming a reused prefix to what the new prompt shares) take
 * the context's lock while other sequences generate. node-llama-cpp's batch loop holds that lock for as long as any
 * decode is queued, and with three or more streams one always is: a fourth request's `clearHistory` waited until the
 * other three generations had finished (bench/README.md). While an erasure is pending, the other sequences' next
 * decodes wait; the loop drains what is queued, lets go of the lock, the erasure runs (a few cache operations), and
 * they go on, together, in the next batch. A sequence with its own erasure pending is never held (its erasure may
 * re-evaluate tokens before it returns). Wraps `LlamaContext._decodeTokens` and
 * `LlamaContextSequence._eraseContextTokenRanges`.
 */
function letErasuresIn (Context: LlamaModule['LlamaContext'], Sequence: LlamaModule['LlamaContextSequence']): string | null {
  const context = prototypeOf(Context)
  const sequence = prototypeOf(Sequence)
  if (context[ERASURES] === true) return null
  const decode = context._decodeTokens
  const erase = sequence._eraseContextTokenRanges
  const problem = signatureProblem('LlamaContext', '_decodeTokens', decode, CONTEXT_DECODE) ??
    signatureProblem('LlamaContextSequence', '_eraseContextTokenRanges', erase, ERASE)
  const fields = undeclaredFields(Sequence, ['_context', '_sequenceId'])
  if (problem != null || fields.length > 0) return problem ?? `LlamaContextSequence no longer declares ${fields.join(', ')}`
  context[ERASURES] = true
  const states = new WeakMap<object, ErasureState>()
  const stateOf = (owner: object): ErasureState => {
    let state = states.get(owner)
    if (state == null) states.set(owner, state = { pending: new Map(), waiting: [] })
    return state
  }
  const erasing = async function (this: { _context: object, _sequenceId: number }, ...args: unknown[]): Promise<unknown> {
    const state = stateOf(this._context)
    const id = this._sequenceId
    state.pending.set(id, (state.pending.get(id) ?? 0) + 1)
    try {
      return await (erase as (...a: unknown[]) => Promise<unknown>).apply(this, args)
    } finally {
      const left = (state.pending.get(id) ?? 1) - 1
      if (left > 0) state.pending.set(id, left)
      else state.pending.delete(id)
      if (state.pending.size === 0) for (const resume of state.waiting.splice(0)) resume()
    }
  }
  // Not an async function: with no erasure pending (nearly always) the decode's own promise is returned as it is. Two
  // more promise hops per decode let node-llama-cpp's batch loop find its queue empty and let go of the lock before the
  // sequence re-queued, and taking it again costs time on every token (bench/README.md).
  const decoding = function (this: object, ...args: unknown[]): Promise<unknown> {
    const state = states.get(this)
    const id = (args[0] as { sequenceId?: unknown } | undefined)?.sequenceId
    const held = (): boolean => state != null && state.pending.size > 0 && !(typeof id === 'number' && state.pending.has(id))
    if (!held()) return (decode as (...a: unknown[]) => Promise<unknown>).apply(this, args)
    return (async () => {
      while (held()) await new Promise<void>((resolve) => { state?.waiting.push(resolve) })
      return await (decode as (...a: unknown[]) => Promise<unknown>).apply(this, args)
    })()
  }
  Object.defineProperty(erasing, ORIGINAL, { value: erase })
  Object.defineProperty(decoding, ORIGINAL, { value: decode })
  sequence._eraseContextTokenRanges = erasing
  context._decodeTokens = decoding
  return null
}

// ---------------------------------------------------------------------------------------------------------------------
// json-number-grammar

// At most 15 digits: every integer the grammar admits is a safe integer (below 2^53), so a schema bounded by the
// safe-integer range, as zod writes every integer's, is held by the grammar itself
export const INTEGER_GRAMMAR = '"-"? ("0" | [1-9] [0-9]{0,14})'
export const NUMBER_GRAMMAR = `${INTEGER_GRAMMAR} ("." [0-9]{1,16})? ([eE] [-+]? [0-9]{1,2})?`
const KNOWN_INTEGER_GRAMMAR = '"-"? ("0" | [1-9] [0-9]{0,15}) ([eE] [-+]? ("0" | [1-9] [0-9]{0,15}))?'
const KNOWN_NUMBER_GRAMMAR = '"-"? ("0" | [1-9] [0-9]{0,15}) ("." [0-9]{1,16})? ([eE] [-+]? ("0" | [1-9] [0-9]{0,15}))?'
const BOUNDED = Symbol.for('meshnode.boundedNumberGrammar')

type GbnfNumberClass = new (options: { allowFractional: boolean }) => { getGrammar (): string }

/**
 * node-llama-cpp's JSON grammar lets a number carry an exponent of up to 16 digits, for `integer` too: `5e-3` passes
 * as an integer and `1e9999` parses to Infinity. node-llama-cpp then rejects the function call it constrained
 * ("Expected type integer but got number") and the request failed; with response_format the text was simply
 * invalid against the caller's schema. Integers get no exponent and numbers an exponent of at most two digits, so
 * whatever the grammar admits parses to a finite value of the right type. `GbnfNumber` is not exported, so it is
 * reached by its file, which is the module node-llama-cpp itself loaded; its grammar text is checked first.
 */
async function boundNumberGrammar (): Promise<string | null> {
  let GbnfNumber: GbnfNumberClass
  try {
    ;({ GbnfNumber } = await import(packageFile('./utils/gbnfJson/terminals/GbnfNumber.js').href) as { GbnfNumber: GbnfNumberClass })
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ERR_MODULE_NOT_FOUND') throw err
    return 'utils/gbnfJson/terminals/GbnfNumber.js is gone'   // moved: reported, and the test names it
  }
  if (typeof GbnfNumber !== 'function') return 'GbnfNumber.js no longer exports GbnfNumber'
  const prototype = prototypeOf(GbnfNumber) as Prototype & { getGrammar (this: { allowFractional: boolean }): string }
  if (prototype[BOUNDED] === true) return null
  const integer = new GbnfNumber({ allowFractional: false }).getGrammar()
  const number = new GbnfNumber({ allowFractional: true }).getGrammar()
  if (integer !== KNOWN_INTEGER_GRAMMAR) return `GbnfNumber's integer grammar is now ${integer}`
  if (number !== KNOWN_NUMBER_GRAMMAR) return `GbnfNumber's number grammar is now ${number}`
  prototype[BOUNDED] = true
  prototype.getGrammar = function (): string { return this.allowFractional ? NUMBER_GRAMMAR : INTEGER_GRAMMAR }
  return null
}

// ---------------------------------------------------------------------------------------------------------------------
// defs-registered-once

const REGISTERED_ONCE = Symbol.for('meshnode.defsRegisteredOnce')

interface DefsRegistry { registerDefs (this: object, scopeDefs: unknown): void }

/**
 * node-llama-cpp writes a JSON schema's grammar (`GbnfGrammarGenerator`), and its TypeScript-like text for a tool's
 * documentation (`DefScopeDefs`), registering every definition of the schema's `$defs` again at every object, array,
 * anyOf and $ref it meets: one map write per definition each time, so definitions × nodes on the event loop (2,000
 * of each: 4 s). The definitions object is the same one at every node of a scope (`joinDefs` returns its parent when
 * a node adds none), and registering it again writes the same entries: each registry registers an object once.
 * Neither class is exported; each is reached by its file, the module node-llama-cpp itself loaded.
 */
async function registerDefsOnce (): Promise<string | null> {
  const registries: Array<[string, string]> = [['./utils/gbnfJson/GbnfGrammarGenerator.js', 'GbnfGrammarGenerator'], ['./utils/gbnfJson/utils/defsScope.js', 'DefScopeDefs']]
  const prototypes: Array<Prototype & DefsRegistry> = []
  for (const [file, name] of registries) {
    let Class: unknown
    try {
      Class = (await import(packageFile(file).href) as Record<string, unknown>)[name]
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ERR_MODULE_NOT_FOUND') throw err
      return `${file.slice(2)} is gone` // moved: reported, and the test names it
    }
    if (typeof Class !== 'function') return `${file.slice(2)} no longer exports ${name}`
    const prototype = prototypeOf(Class as { prototype: object }) as Prototype & DefsRegistry
    if (prototype[REGISTERED_ONCE] === true) continue
    const problem = signatureProblem(name, 'registerDefs', prototype.registerDefs, '(scopeDefs)')
    if (problem != null) return problem
    prototypes.push(prototype)
  }
  for (const prototype of prototypes) {
    const original = prototype.registerDefs
    const registered = new WeakMap<object, WeakSet<object>>()
    const once = function (this: object, scopeDefs: unknown): void {
      if (typeof scopeDefs === 'object' && scopeDefs !== null) {
        let seen = registered.get(this)
        if (seen == null) registered.set(this, seen = new WeakSet())
        if (seen.has(scopeDefs)) return
        seen.add(scopeDefs)
      }
      original.call(this, scopeDefs)
    }
    ;(once as unknown as Prototype)[ORIGINAL] = original
    prototype.registerDefs = once
    prototype[REGISTERED_ONCE] = true
  }
  return null
}

// ---------------------------------------------------------------------------------------------------------------------
// token-loop: the private parts our own token loop (token-loop.ts) drives

type StopTrigger = ReadonlyArray<string | Token>
interface TokenReleaseLock { dispose (): void }
interface QueuedTokenRelease { createTextIndexLock (index: number): TokenReleaseLock, createTokenIndexLock (index: number): TokenReleaseLock }
interface TriggeredStop { stopTrigger: StopTrigger }
export interface LoopSampler { readonly _sampler: unknown, applyConfig (config: object): void, dispose (): void }

/** What LlamaChat and LlamaCompletion generate with, that node-llama-cpp's index does not export, and its private calls. */
export interface LlamaInternals {
  LlamaSampler: new (model: LlamaModel) => LoopSampler
  StopGenerationDetector: {
    new (): {
      addStopTrigger (trigger: StopTrigger): void
      recordGeneration (generation: { text: string, tokens: Token[], queuedTokenRelease: QueuedTokenRelease }): void
      readonly hasTriggeredStops: boolean
      getTriggeredStops (): TriggeredStop[]
    }
    resolveStopTriggers (triggers: ReadonlyArray<LlamaText | string | StopTrigger>, tokenizer: Tokenizer): StopTrigger[]
  }
  TokenStreamRegulator: new () => {
    addChunk (chunk: { tokens: Token[], text: string }): QueuedTokenRelease
    popFreeChunkTokens (): Token[]
    getPartiallyFreeChunk (tokenizer: Tokenizer): { tokens: Token[], text: string }
  }
  getQueuedTokensBeforeStopTrigger (triggered: TriggeredStop[], partiallyFree: { tokens: Token[], text: string }, tokenizer: Tokenizer): Token[]
  /** The native sampler configuration for `options`, as node-llama-cpp's own evaluation resolves it. */
  resolveSamplerConfig (sequence: LlamaContextSequence, options: object): object
  /**
   * Queues `tokens` on the sequence's context, as node-llama-cpp's own evaluation does, to sample the token after the
   * last one; a sampling failure is left in `failure` (see `queueDecode`).
   */
  queueDecode (sequence: LlamaContextSequence, tokens: Token[], sampler: LoopSampler, failure: { error?: unknown }): Promise<Array<[number, number]>>
  /** The sampled token, once the sequence records `tokens` as evaluated; SamplingError when none was sampled. */
  evaluated (sequence: LlamaContextSequence, tokens: Token[], sampled: Array<[number, number]>, failure: { error?: unknown }): Token
}

/** node-llama-cpp 3.22's private parts of a sequence that the loop drives: the queue every sequence's decodes go through. */
interface SequenceInternals {
  _sequenceId: number
  _nextTokenIndex: number
  _contextTokens: Token[]
  _tokenMeter: unknown
  _context: {
    _ctx: { sampleToken (batchLogitIndex: number, sampler: unknown): Promise<number> }
    _decodeTokens (
      item: { sequenceId: number, tokens: Token[], firstTokenSequenceIndex: number, logits: boolean[], evaluationPriority: number, tokenMeter: unknown },
      logitDataMapper: (batchLogitIndex: number) => Promise<number>
    ): Promise<Array<[number, number]>>
  }
  _resolveSamplerConfig (options: object): object
}

const SEQUENCE_FIELDS = ['_sequenceId', '_context', '_tokenMeter', '_contextTokens', '_nextTokenIndex'] as const
/** How node-llama-cpp's own evaluation samples a token: the call the loop makes the same way. */
const NATIVE_SAMPLE = 'this._context._ctx.sampleToken(batchLogitIndex, sampler._sampler)'
/** node-llama-cpp's default evaluation priority, as LlamaChat and LlamaCompletion pass it. */
const EVALUATION_PRIORITY = 5

/** The internal modules, by their files in the package, and a check of every private call `LlamaInternals` makes. */
async function tokenLoopParts (loaded: LlamaModule): Promise<{ internals: LlamaInternals | null, problem: string | null }> {
  const file = async (path: string): Promise<Record<string, unknown>> => await import(packageFile(path).href) as Record<string, unknown>
  let modules: Array<Record<string, unknown>>
  try {
    modules = await Promise.all([
      file('./evaluator/LlamaContext/LlamaSampler.js'), file('./utils/StopGenerationDetector.js'),
      file('./utils/TokenStreamRegulator.js'), file('./utils/getQueuedTokensBeforeStopTrigger.js')
    ])
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ERR_MODULE_NOT_FOUND') throw err
    return { internals: null, problem: (err as Error).message }   // a file moved: reported, and the test names it
  }
  const [sampler, detector, regulator, before] = modules
  const LlamaSampler = sampler.LlamaSampler as LlamaInternals['LlamaSampler']
  const StopGenerationDetector = detector.StopGenerationDetector as LlamaInternals['StopGenerationDetector']
  const TokenStreamRegulator = regulator.TokenStreamRegulator as LlamaInternals['TokenStreamRegulator']
  const getQueuedTokensBeforeStopTrigger = before.getQueuedTokensBeforeStopTrigger as LlamaInternals['getQueuedTokensBeforeStopTrigger']
  const methods: Array<[string, unknown, string[]]> = [
    ['LlamaSampler', LlamaSampler, ['applyConfig', 'dispose']],
    ['StopGenerationDetector', StopGenerationDetector, ['addStopTrigger', 'recordGeneration', 'getTriggeredStops']],
    ['TokenStreamRegulator', TokenStreamRegulator, ['addChunk', 'popFreeChunkTokens', 'getPartiallyFreeChunk']]
  ]
  const problems: string[] = []
  for (const [name, Class, names] of methods) {
    if (typeof Class !== 'function') { problems.push(`${name} is no longer exported by its file`); continue }
    const missing = names.filter((method) => typeof prototypeOf(Class as { prototype: object })[method] !== 'function')
    if (missing.length > 0) problems.push(`${name} has no ${missing.join(', ')}`)
  }
  if (typeof StopGenerationDetector?.resolveStopTriggers !== 'function') problems.push('StopGenerationDetector.resolveStopTriggers is gone')
  if (typeof getQueuedTokensBeforeStopTrigger !== 'function') problems.push('getQueuedTokensBeforeStopTrigger is no longer exported by its file')
  if (typeof LlamaSampler === 'function' && undeclaredFields(LlamaSampler, ['_sampler']).length > 0) problems.push('LlamaSampler no longer declares _sampler')
  const sequenceFields = undeclaredFields(loaded.LlamaContextSequence, SEQUENCE_FIELDS)
  if (sequenceFields.length > 0) problems.push(`LlamaContextSequence no longer declares ${sequenceFields.join(', ')}`)
  if (undeclaredFields(loaded.LlamaContext, ['_ctx']).length > 0) problems.push('LlamaContext no longer declares _ctx')
  if (typeof prototypeOf(loaded.LlamaContextSequence)._resolveSamplerConfig !== 'function') problems.push('LlamaContextSequence._resolveSamplerConfig is gone')
  if (!Function.prototype.toString.call(loaded.LlamaContextSequence).includes(NATIVE_SAMPLE)) problems.push(`LlamaContextSequence no longer samples with ${NATIVE_SAMPLE}`)
  const decode = signatureProblem('LlamaContext', '_decodeTokens', prototypeOf(loaded.LlamaContext)._decodeTokens, CONTEXT_DECODE)
  if (decode != null) problems.push(decode)
  if (problems.length > 0) return { internals: null, problem: problems.join('; ') }
  return {
    problem: null,
    internals: {
      LlamaSampler,
      StopGenerationDetector,
      TokenStreamRegulator,
      getQueuedTokensBeforeStopTrigger,
      resolveSamplerConfig: (sequence, options) => (sequence as unknown as SequenceInternals)._resolveSamplerConfig(options),
      queueDecode,
      evaluated
    }
  }
}

/**
 * Queues `tokens` on the sequence's context, as node-llama-cpp's own evaluation does, to sample the token after the
 * last one. A sampling failure is caught where node-llama-cpp's batch loop would have it unhandled (as
 * `guardSampling` does for its own evaluation) and left in `failure`. Not an async function, and awaited by the loop
 * itself: the loop then resumes, and queues the next decode, before node-llama-cpp's batch loop looks at its queue
 * again; if the batch loop found its queue empty first it would let go of the context's lock, and taking it again
 * costs time on every token (bench/README.md).
 */
function queueDecode (sequence: LlamaContextSequence, tokens: Token[], sampler: LoopSampler, failure: { error?: unknown }): Promise<Array<[number, number]>> {
  const seq = sequence as unknown as SequenceInternals & LlamaContextSequence
  // node-llama-cpp's own checks before a decode (planning keeps every request within the context, so these never fire)
  if (seq.disposed) throw new Error('The context sequence was disposed')
  if (seq._nextTokenIndex + tokens.length > seq.context.contextSize - 1) throw new Error('The context is full')
  const context = seq._context
  const logits: boolean[] = []
  logits[tokens.length - 1] = true
  return context._decodeTokens({
    sequenceId: seq._sequenceId,
    tokens,
    firstTokenSequenceIndex: seq._nextTokenIndex,
    logits,
    evaluationPriority: EVALUATION_PRIORITY,
    tokenMeter: seq._tokenMeter
  }, (batchLogitIndex) => {
    const fail = (error: unknown): number => {
      failure.error ??= error
      return -1
    }
    try {
      return context._ctx.sampleToken(batchLogitIndex, sampler._sampler).catch(fail)
    } catch (error) { // thrown, not rejected: it would escape into node-llama-cpp's batch loop, which nobody awaits
      return Promise.resolve(fail(error))
    }
  })
}

/** The sampled token, once the sequence records `tokens` as evaluated (what node-llama-cpp's own decode records). */
function evaluated (sequence: LlamaContextSequence, tokens: Token[], sampled: Array<[number, number]>, failure: { error?: unknown }): Token {
  const seq = sequence as unknown as SequenceInternals
  seq._nextTokenIndex += tokens.length
  for (const token of tokens) seq._contextTokens.push(token)
  if ('error' in failure) throw new SamplingError(failure.error)
  const token = sampled.at(-1)?.[1]
  if (token == null || token < 0) throw new SamplingError(new Error('no token was sampled'))
  return token as Token
}

// ---------------------------------------------------------------------------------------------------------------------
// batch-sequence-order

/** How `LlamaContext._decodeTokens` queues an item: with its sequence id, in the context's `_queuedDecodes`. */
const QUEUED_WITH_ID = 'this._queuedDecodes.push({ sequenceId,'

function batchSequenceOrderProblem (Context: LlamaModule['LlamaContext']): string | null {
  if (undeclaredFields(Context, ['_queuedDecodes']).length > 0) return 'LlamaContext no longer declares _queuedDecodes'
  const decode = prototypeOf(Context)._decodeTokens
  const own = typeof decode === 'function' ? ((decode as unknown as Prototype)[ORIGINAL] ?? decode) : null
  if (own == null || !Function.prototype.toString.call(own).replace(/\s+/g, ' ').includes(QUEUED_WITH_ID)) {
    return 'LlamaContext._decodeTokens no longer queues each item with its sequenceId in _queuedDecodes'
  }
  return null
}

/**
 * The context's queue of decodes, in the order of the items its batching strategy is given, each with its
 * `sequenceId` (batching.ts sorts a batch by it); null when the context has no such queue (the `batch-sequence-order`
 * patch then says it did not take, and batches keep their queue order).
 */
export function decodeQueueOf (context: LlamaContext): (() => ReadonlyArray<{ sequenceId?: unknown }>) | null {
  const queued = context as unknown as { _queuedDecodes?: unknown }
  return Array.isArray(queued._queuedDecodes) ? () => queued._queuedDecodes as ReadonlyArray<{ sequenceId?: unknown }> : null
}

// ---------------------------------------------------------------------------------------------------------------------
// tokenizer-arrays-released

/** What node-llama-cpp's copy of a GGUF's tokenizer may lose once the model is loaded (`releaseTokenizerArrays`). */
export const RELEASED_TOKENIZER_KEYS = ['merges', 'scores', 'token_type', 'precompiled_charsmap'] as const

function tokenizerArraysProblem (Model: LlamaModule['LlamaModel']): string | null {
  const getter = Object.getOwnPropertyDescriptor(Model.prototype, 'fileInfo')?.get
  if (getter == null) return 'LlamaModel.fileInfo is no longer a getter'
  if (undeclaredFields(Model, ['_fileInfo']).length > 0) return 'LlamaModel no longer keeps the metadata in _fileInfo'
  const source = Function.prototype.toString.call(Model)
  const read = RELEASED_TOKENIZER_KEYS.filter((key) => new RegExp(`ggml\\??\\.(?:\\[")?${key}\\b`).test(source))
  return read.length === 0 ? null : `LlamaModel now reads the tokenizer's ${read.join(', ')}`
}

/**
 * node-llama-cpp keeps the GGUF's whole metadata as the model's `fileInfo`, the tokenizer's arrays included, though
 * llama.cpp holds the vocabulary itself: for a vocabulary of 152k tokens with as many BPE merges (Qwen2.5's), tens of
 * MB of JavaScript strings and numbers for the life of the model (bench/README.md). Once the model is loaded,
 * node-llama-cpp 3.22 reads, of the tokenizer's arrays, only the number of tokens (`tokens.length`, as
 * `vocabularySize` does; its scalar keys, the end token and the chat template, stay), so the merges, scores, token
 * types and SentencePiece's character map are let go. The tokens stay. node-llama-cpp's types still declare them:
 * code of ours that wants them must read the GGUF itself. Does nothing where the `tokenizer-arrays-released` patch
 * did not take.
 */
export function releaseTokenizerArrays (model: LlamaModel): void {
  if (tokenizerArraysProblem(model.constructor as LlamaModule['LlamaModel']) != null) return
  const ggml = (model.fileInfo.metadata as { tokenizer?: { ggml?: object } }).tokenizer?.ggml
  if (ggml == null) return
  for (const key of RELEASED_TOKENIZER_KEYS) Reflect.deleteProperty(ggml, key)
}

// ---------------------------------------------------------------------------------------------------------------------
// prebuilt-binary-redirect

/** Where node-llama-cpp imports its prebuilt binary packages, and how each must answer. */
const BINARY_IMPORTS = './bindings/utils/compileLLamaCpp.js'

function prebuiltBinaryProblem (): string | null {
  let source: string
  try {
    source = readFileSync(fileURLToPath(packageFile(BINARY_IMPORTS)), 'utf8')
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err
    return `${BINARY_IMPORTS.slice(2)} is gone`
  }
  if (!source.includes('import("@node-llama-cpp/')) return `${BINARY_IMPORTS.slice(2)} no longer imports the binary packages by name`
  if (!/getBinsDir(?:\?\.)?\(\)/.test(source) || !source.includes('packageVersion')) return `${BINARY_IMPORTS.slice(2)} no longer asks a binary package for getBinsDir() and its packageVersion`
  return null
}

/**
 * Packages installed in a gpu dir, by name, for the resolution hook. A module-level registry, which the code
 * otherwise avoids, and why: module resolution is process-wide, so the hook is registered once per process, and
 * node-llama-cpp imports its binary packages by bare name from its own folder, which only a hook can point elsewhere.
 */
const redirected = new Map<string, string>()
let hookRegistered = false

/** The package names node-llama-cpp imports its binaries by (`import("@node-llama-cpp/…")` in its source). */
export function prebuiltBinaryImports (): string[] {
  const source = readFileSync(fileURLToPath(packageFile(BINARY_IMPORTS)), 'utf8')
  return [...new Set([...source.matchAll(/import\("(@node-llama-cpp\/[^"]+)"\)/g)].map((match) => match[1]))]
}

/**
 * Makes node-llama-cpp's import of each package named in `packages` load the file given instead (the entry of a
 * package `meshnode gpu install` put outside node_modules). A name already redirected keeps its first file.
 */
export function redirectPrebuiltBinaries (packages: ReadonlyMap<string, string>): void {
  for (const [name, url] of packages) if (!redirected.has(name)) redirected.set(name, url)
  if (hookRegistered || redirected.size === 0) return
  hookRegistered = true
  registerHooks({
    resolve: (specifier, context, nextResolve) => {
      const url = redirected.get(specifier)
      return url == null ? nextResolve(specifier, context) : { url, format: 'module', shortCircuit: true }
    }
  })
}

// ---------------------------------------------------------------------------------------------------------------------
// Applying them all, once

interface Patched { module: LlamaModule, internals: LlamaInternals | null, reports: PatchReport[] }

// A module-level memo, which the code otherwise avoids, and why: node-llama-cpp is one module per process, and a
// patch changes its classes for every user in the process, so it is applied once, when node-llama-cpp is first imported.
let patched: Promise<Patched> | null = null

async function applyPatches (): Promise<Patched> {
  patched ??= (async () => {
    const loaded = await import('node-llama-cpp')
    const dependency = `node-llama-cpp ${await loaded.getModuleVersion()}`
    // The checks that read node-llama-cpp's own methods run before the patches wrap them
    const loop = await tokenLoopParts(loaded)
    const order = batchSequenceOrderProblem(loaded.LlamaContext)
    const outcomes: Array<{ name: string, reason: string, problem: string | null, applies?: string }> = [
      {
        name: 'sampling-guard',
        reason: 'a sampler failure inside the shared batch loop (a grammar at a near-zero temperature) is an unhandled rejection that ends the process',
        problem: guardSampling(loaded.LlamaContextSequence)
      },
      {
        name: 'erasures-take-the-lock',
        reason: 'clearing or trimming a slot waits until every other generation on the model has finished',
        problem: letErasuresIn(loaded.LlamaContext, loaded.LlamaContextSequence)
      },
      {
        name: 'json-number-grammar',
        reason: 'a JSON grammar admits integers with exponents and numbers that parse to Infinity, so constrained tool calls fail and response_format answers break their schema',
        problem: await boundNumberGrammar()
      },
      {
        name: 'defs-registered-once',
        reason: 'writing a JSON schema\'s grammar or a tool\'s documentation registers every $defs entry again at every node: definitions × nodes on the event loop',
        problem: await registerDefsOnce()
      },
      {
        name: 'token-loop',
        reason: 'plain chats and completions run on LlamaChat and LlamaCompletion instead of our token loop: 0.22-0.26 ms more per token',
        problem: loop.problem
      },
      {
        name: 'batch-sequence-order',
        reason: 'a batch of several streams is decoded in queue order, which llama.cpp splits into one micro-batch per sequence',
        problem: order
      },
      {
        name: 'tokenizer-arrays-released',
        reason: 'a loaded model keeps its tokenizer\'s merges, scores and token types as JavaScript values: tens of MB for a large vocabulary',
        problem: tokenizerArraysProblem(loaded.LlamaModel),
        applies: 'applied to each model as it loads'
      },
      {
        name: 'prebuilt-binary-redirect',
        reason: 'a GPU package installed by `meshnode gpu install` is not found, and llama.cpp runs on the CPU',
        problem: prebuiltBinaryProblem(),
        applies: 'registered when a GPU package is installed in the data dir'
      }
    ]
    const reports = outcomes.map(({ name, reason, problem, applies }): PatchReport => ({
      name,
      dependency,
      reason,
      active: problem == null,
      ...(problem != null ? { detail: problem } : applies != null ? { detail: applies } : {})
    }))
    return { module: loaded, internals: loop.internals, reports }
  })()
  return await patched
}

/** node-llama-cpp with every patch applied (each applied once per process, when this is first awaited). */
export async function patchedNodeLlamaCpp (): Promise<LlamaModule> {
  return (await applyPatches()).module
}

/** Applies every patch of node-llama-cpp (once per process) and says whether each took. */
export async function nodeLlamaCppPatches (): Promise<PatchReport[]> {
  return [...(await applyPatches()).reports]
}

/** The private parts our token loop drives; null where the `token-loop` patch did not take (then LlamaChat runs). */
export async function tokenLoopInternals (): Promise<LlamaInternals | null> {
  return (await applyPatches()).internals
}
