// Over 400 lines on purpose: the store's index, its integrity checks, its budget and its save/restore steps share one
// state (what is on disk and verified), whose every change must be read beside the others.
// Long evaluated prefixes kept on disk: an agent's system prompt and tools, evaluated once, outlive its slot being
// cleared for another requester, its model being unloaded or evicted, and the node restarting. A slot about to lose a
// prefix of at least `minTokens` saves its sequence's state (node-llama-cpp's `saveStateToFile`); the next request of
// the same requester on the same model file whose prompt shares more of it than its slot holds loads it back
// (`loadStateFromFile`) and evaluates only the rest. The engine holds one store (engine.ts); each loaded chat model
// saves and restores through a PrefixKeeper of it (slot-cache.ts).
import { createHash, randomBytes } from 'node:crypto'
import { createReadStream } from 'node:fs'
import { access, chmod, mkdir, open, readdir, readFile, rename, rm, stat } from 'node:fs/promises'
import { join } from 'node:path'
import type { Token } from 'node-llama-cpp'
import { z } from 'zod'
import type { InferenceLogger } from './model-instance.ts'
import { isAnonymous, unkeyedRequester, type CachedSlot, type PrefixKeeper, type Requester } from './slot-cache.ts'

/** Shorter prefixes are evaluated again about as fast as a state is written and read back: they are not kept. */
export const PREFIX_STATE_MIN_TOKENS = 1024
/** Disk the states may take together (`serve --prefix-cache-gb`): 2 GiB. */
export const DEFAULT_PREFIX_STATE_BUDGET_BYTES = 2 * 1024 ** 3
/** States kept per model and requester (its keyed sessions together): an agent's few long prompts, not every conversation it had. */
export const MAX_PREFIX_STATES_PER_REQUESTER = 8
/** States kept in all, however small: the index holds each one's tokens and is rewritten at every save. */
export const MAX_PREFIX_STATES = 256

const INDEX_FILE = 'index.json'
const INDEX_VERSION = 1
/** Our file names; nothing else in the directory is ever removed. */
const STATE_FILE = /^[0-9a-f]{64}\.state$/
const TEMP_FILE = /^(?:[0-9a-f]{64}\.state|index\.json)\.[0-9a-f]{16}\.tmp$/

/**
 * A model file as it was when loaded. A state is only ever loaded into the model that made it (llama.cpp may crash on
 * another's), so another path, size or modification time is another model.
 */
const ModelFileIdentity = z.object({ path: z.string().min(1), sizeBytes: z.number().int().nonnegative(), mtimeMs: z.number().nonnegative() })
type ModelFileIdentity = z.infer<typeof ModelFileIdentity>

/**
 * Flash attention as the context was made with it (node-llama-cpp's `flashAttention`): llama.cpp lays the cache's
 * values out otherwise with it and refuses a state of the other layout. Indexes written before it was recorded held
 * states of the default, auto.
 */
const ContextFlashAttention = z.union([z.boolean(), z.literal('auto')])

const StateRecord = z.object({
  file: z.string().regex(STATE_FILE),
  model: ModelFileIdentity,
  contextLength: z.number().int().positive(),
  /** The context's sequences (slots): llama.cpp keeps one cache stream per sequence and loads a state only into as many. */
  sequences: z.number().int().positive(),
  flashAttention: ContextFlashAttention.default('auto'),
  requester: z.string().min(1),
  /** The sequence's tokens when saved: what prompts are matched against, and what loading must give back. */
  tokens: z.array(z.number().int().nonnegative()).min(1),
  sizeBytes: z.number().int().positive(),
  sha256: z.string().regex(/^[0-9a-f]{64}$/),
  /** Unix ms of its last save or restore, for least-recently-used eviction. */
  lastUsedAt: z.number()
})
type StateRecord = z.infer<typeof StateRecord>

const StateIndex = z.object({ version: z.literal(INDEX_VERSION), states: z.array(StateRecord) })

/** Which states a loaded model may use: those made by the same file in a context of the same shape. */
export interface PrefixScope {
  /** The model file (read again here, for its size and modification time). */
  path: string
  /** Tokens of each sequence. */
  contextLength: number
  /** Sequences (slots) in the context. */
  sequences: number
  /** The context's flash attention, as given to node-llama-cpp. */
  flashAttention: boolean | 'auto'
}

interface Scope {
  model: ModelFileIdentity
  contextLength: number
  sequences: number
  flashAttention: boolean | 'auto'
}

export interface PrefixStatesDeps {
  log: InferenceLogger
}

export interface PrefixStatesOptions {
  /** Where the states and their index live (the node's `<dataDir>/prefix-states`), made if missing; one store per directory. */
  dir: string
  /** Bytes the state files may take together; the least recently used go first. 0 keeps none. @default DEFAULT_PREFIX_STATE_BUDGET_BYTES (2 GiB) */
  budgetBytes?: number
  /** Fewest tokens a prefix must hold to be saved, and a saved one must share with a prompt to be restored. @default PREFIX_STATE_MIN_TOKENS (1024) */
  minTokens?: number
}

/**
 * The prefix states of one directory: each file indexed with the model file, context length and requester it belongs
 * to, its tokens, its size and sha256 (checked before it is loaded: a file that fails is removed, never loaded), within
 * a disk budget, MAX_PREFIX_STATES_PER_REQUESTER per model and requester. States of a model file that is gone or
 * changed are removed when the store opens and at every save. Saving and loading run on node-llama-cpp's threads.
 */
export class PrefixStates {
  readonly #log: InferenceLogger
  readonly #dir: string
  readonly #budgetBytes: number
  readonly #minTokens: number
  /** Every state on disk, as the index lists it. */
  #states: StateRecord[] = []
  /** Resolves with whether the store could open; a store that cannot saves and restores nothing. */
  #opened: Promise<boolean> | null = null
  #closed = false
  /** Saves being hashed and indexed, by scope and requester: a restore for the same waits for them. */
  readonly #saving = new Map<string, Set<Promise<void>>>()
  /** Index writes, one after another. */
  #writing: Promise<void> = Promise.resolve()
  /** Whether restores were stamped since the index was last written (it is written at the next save, or at close). */
  #touched = false
  /** The last use stamped: stamps only grow, so two uses within one millisecond keep their order. */
  #clock = 0

  constructor (deps: PrefixStatesDeps, options: PrefixStatesOptions) {
    this.#log = deps.log
    this.#dir = options.dir
    this.#budgetBytes = options.budgetBytes ?? DEFAULT_PREFIX_STATE_BUDGET_BYTES
    this.#minTokens = options.minTokens ?? PREFIX_STATE_MIN_TOKENS
    if (!Number.isSafeInteger(this.#budgetBytes) || this.#budgetBytes < 0) throw new RangeError(`LocalEngine option prefixStateBudgetBytes must be an integer >= 0, got ${this.#budgetBytes}`)
    if (!Number.isSafeInteger(this.#minTokens) || this.#minTokens < 1) throw new RangeError(`LocalEngine option prefixStateMinTokens must be an integer >= 1, got ${this.#minTokens}`)
  }

  /**
   * What a chat model loaded from `path` saves and restores its slots' prefixes through; null when the store cannot
   * open or the file cannot be read. The first call opens the store.
   */
  async keeperFor ({ path, contextLength, sequences, flashAttention }: PrefixScope): Promise<PrefixKeeper | null> {
    if (this.#closed || !await (this.#opened ??= this.#open())) return null
    let model: ModelFileIdentity
    try {
      const file = await stat(path)
      model = { path, sizeBytes: file.size, mtimeMs: file.mtimeMs }
    } catch (err) {
      // gone since it was loaded: whatever it saved could never be restored
      this.#log.warn({ err, path }, 'prefix states are off for this model: its file cannot be read')
      return null
    }
    const scope: Scope = { model, contextLength, sequences, flashAttention }
    return {
      keep: async (slot) => { await this.#keep(scope, slot) },
      restore: async (slot, requester, tokens, held) => { await this.#restore(scope, slot, requester, tokens, held) },
      settled: async () => { await this.#settled() }
    }
  }

  /** Waits for the saves under way and writes the index; saves nothing more. */
  async close (): Promise<void> {
    this.#closed = true
    await this.#settled()
    if (this.#touched) await this.#writeIndex().catch((err: unknown) => { this.#log.warn({ err, dir: this.#dir }, 'writing the prefix state index failed') })
  }

  /** Reads the index; drops what it lists wrongly, what is stale or over the limits, and our files it does not list. */
  async #open (): Promise<boolean> {
    try {
      await mkdir(this.#dir, { recursive: true, mode: 0o700 })
      const seen = new Set<string>()
      for (const state of await this.#readIndex()) {
        const size = await stat(join(this.#dir, state.file)).then((file) => file.size, () => null)
        // a file that is gone or of another size than recorded (cut short) is not used; the sweep below removes it
        if (size === state.sizeBytes && !seen.has(state.file)) this.#states.push(state)
        seen.add(state.file)
      }
      this.#clock = this.#states.reduce((last, state) => Math.max(last, state.lastUsedAt), 0)
      const dropped = new Set([...await this.#stale(), ...this.#overLimits()])
      this.#states = this.#states.filter((state) => !dropped.has(state))
      await this.#writeIndex()
      // Ours that the index does not list: dropped above, a save cut short by a crash, a state whose record was lost
      const listed = new Set(this.#states.map((state) => state.file))
      for (const name of await readdir(this.#dir)) {
        if ((STATE_FILE.test(name) && !listed.has(name)) || TEMP_FILE.test(name)) await this.#removeFile(name)
      }
      return true
    } catch (err) {
      this.#log.warn({ err, dir: this.#dir }, 'prefix states are off: their directory cannot be opened')
      return false
    }
  }

  async #readIndex (): Promise<StateRecord[]> {
    let text: string
    try {
      text = await readFile(join(this.#dir, INDEX_FILE), 'utf8')
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return [] // a new directory
      throw err
    }
    let json: unknown = null
    try {
      json = JSON.parse(text)
    } catch (err) {
      // edited by hand or not ours: treated as a wrong index below
      this.#log.debug({ err }, 'the prefix state index is not JSON')
    }
    const parsed = StateIndex.safeParse(json)
    if (parsed.success) return parsed.data.states
    this.#log.warn({ dir: this.#dir }, 'the prefix state index is unreadable: the states it listed are removed')
    return []
  }

  async #keep (scope: Scope, slot: CachedSlot): Promise<void> {
    const owner = slot.owner
    if (owner == null || isAnonymous(owner) || this.#closed || this.#budgetBytes === 0) return
    const tokens: number[] = slot.sequence.contextTokens
    if (tokens.length < this.#minTokens) return
    const covering = this.#states.find((state) => inScope(state, scope, owner) && startsWith(state.tokens, tokens))
    if (covering != null) {
      // on disk already, or within a longer state: only its use is noted
      this.#touch(covering)
      return
    }
    const file = stateFileName(scope, owner, tokens)
    const temp = `${file}.${randomBytes(8).toString('hex')}.tmp`
    try {
      // a directory removed under a running node is not made again: llama.cpp would only fail to write into it
      await access(this.#dir)
      await letIn(slot.sequence, async () => await slot.sequence.saveStateToFile(join(this.#dir, temp)))
    } catch (err) {
      this.#log.warn({ err, path: scope.model.path, tokens: tokens.length }, 'saving a prefix state failed: it is not kept')
      await this.#removeFile(temp)
      return
    }
    // The slot is free again: checking, naming and indexing the file need only the file, and the request waits for none of it
    const group = groupKey(scope, owner)
    let saving = this.#saving.get(group)
    if (saving == null) this.#saving.set(group, saving = new Set())
    const pending = saving
    const indexed: Promise<void> = this.#index(scope, owner, tokens, file, temp).finally(() => {
      pending.delete(indexed)
      if (pending.size === 0 && this.#saving.get(group) === pending) this.#saving.delete(group)
    })
    pending.add(indexed)
  }

  /** Lists a state just written under its name; what it supersedes and what no longer fits go. Never throws. */
  async #index (scope: Scope, requester: Requester, tokens: number[], file: string, temp: string): Promise<void> {
    try {
      const path = join(this.#dir, temp)
      const sizeBytes = (await stat(path)).size
      const sha256 = await sha256File(path)
      await chmod(path, 0o600) // a prompt is the requester's: as private as the node's other files
      await rename(path, join(this.#dir, file))
      const state: StateRecord = { file, model: scope.model, contextLength: scope.contextLength, sequences: scope.sequences, flashAttention: scope.flashAttention, requester, tokens, sizeBytes, sha256, lastUsedAt: this.#tick() }
      // The same name is the same model, requester and tokens (the rename replaced its file); a shorter state this one
      // starts with is of no more use
      const superseded = this.#states.filter((other) => other.file === file || (inScope(other, scope, requester) && startsWith(tokens, other.tokens)))
      this.#states = [...this.#states.filter((other) => !superseded.includes(other)), state]
      await this.#discard([...superseded, ...await this.#stale(), ...this.#overLimits()])
      this.#log.debug({ path: scope.model.path, tokens: tokens.length, sizeBytes }, 'prefix state saved')
    } catch (err) {
      this.#log.warn({ err, path: scope.model.path, tokens: tokens.length }, 'saving a prefix state failed: it is not kept')
      await this.#removeFile(temp)
    }
  }

  async #restore (scope: Scope, slot: CachedSlot, requester: Requester, tokens: readonly Token[], held: number): Promise<void> {
    if (isAnonymous(requester) || this.#closed || this.#states.length + this.#saving.size === 0) return
    await Promise.all([...this.#saving.get(groupKey(scope, requester)) ?? []])
    let best: StateRecord | null = null
    let shared = 0
    for (const state of this.#states) {
      if (!inScope(state, scope, requester)) continue
      // at least the prompt's last token is evaluated, for its logits
      const reused = Math.min(commonPrefix(state.tokens, tokens), tokens.length - 1)
      if (reused > shared) [best, shared] = [state, reused]
    }
    if (best == null || shared < this.#minTokens || shared <= held) return
    const path = join(this.#dir, best.file)
    const log = { path: scope.model.path, tokens: best.tokens.length }
    if (!await this.#intact(best)) {
      this.#log.warn(log, 'a prefix state file was cut short or altered: it is removed, and the request evaluates its whole prompt')
      await this.#discard([best]).catch((err: unknown) => { this.#log.warn({ err, ...log }, 'removing a prefix state failed') })
      return
    }
    this.#touch(best) // the newest but for what the slot holds, which goes to disk first: eviction takes others
    await this.#keep(scope, slot)
    slot.owner = null // until it holds exactly the state's tokens
    if (slot.sequence.nextTokenIndex > 0) await slot.sequence.clearHistory()
    let loaded: readonly number[] = []
    try {
      await letIn(slot.sequence, async () => { await slot.sequence.loadStateFromFile(path, { acceptRisk: true }) })
      loaded = slot.sequence.contextTokens
    } catch (err) {
      // node-llama-cpp empties the sequence before llama.cpp reads the file, and llama.cpp removes what it read of a
      // state it refuses: the slot is empty
      this.#log.warn({ err, ...log }, 'loading a prefix state failed')
    }
    if (loaded.length !== best.tokens.length || commonPrefix(loaded, best.tokens) !== loaded.length) {
      this.#log.warn(log, 'a prefix state did not load as recorded: it is removed, and the request evaluates its whole prompt')
      if (slot.sequence.nextTokenIndex > 0) await slot.sequence.clearHistory()
      slot.owner = requester
      await this.#discard([best]).catch((err: unknown) => { this.#log.warn({ err, ...log }, 'removing a prefix state failed') })
      return
    }
    slot.owner = requester
    this.#log.debug({ ...log, reused: shared }, 'prefix state restored')
  }

  /** Whether a state's file is still the one indexed: its size, then its sha256. */
  async #intact (state: StateRecord): Promise<boolean> {
    const path = join(this.#dir, state.file)
    try {
      return (await stat(path)).size === state.sizeBytes && await sha256File(path) === state.sha256
    } catch (err) {
      // gone or unreadable: as unusable as an altered one
      this.#log.debug({ err, path }, 'a prefix state file cannot be read')
      return false
    }
  }

  /** States of model files that are gone or changed (another size or modification time): no model can use them again. */
  async #stale (): Promise<StateRecord[]> {
    const current = new Map<string, boolean>()
    for (const state of this.#states) {
      const key = JSON.stringify(state.model)
      if (current.has(key)) continue
      // a model file that cannot be read is as gone as a deleted one
      current.set(key, await stat(state.model.path).then((file) => file.size === state.model.sizeBytes && file.mtimeMs === state.model.mtimeMs, () => false))
    }
    return this.#states.filter((state) => current.get(JSON.stringify(state.model)) === false)
  }

  /**
   * What is over the limits, least recently used first: per model and requester, in all, and the disk budget. The
   * sessions a requester's clients keep apart by cache keys (`keyedRequester`) count as their requester's together,
   * so that cache keys never let one requester crowd the others out of the store.
   */
  #overLimits (): StateRecord[] {
    const over: StateRecord[] = []
    const perGroup = new Map<string, number>()
    let kept = 0
    let bytes = 0
    let full = false
    for (const state of [...this.#states].sort((a, b) => b.lastUsedAt - a.lastUsedAt)) {
      const group = groupKey(state, unkeyedRequester(state.requester))
      const inGroup = perGroup.get(group) ?? 0
      full ||= kept >= MAX_PREFIX_STATES || bytes + state.sizeBytes > this.#budgetBytes
      if (full || inGroup >= MAX_PREFIX_STATES_PER_REQUESTER) {
        over.push(state)
        continue
      }
      perGroup.set(group, inGroup + 1)
      kept++
      bytes += state.sizeBytes
    }
    return over
  }

  /** Takes states out of the index, then removes their files (a crash between leaves files the next open sweeps). */
  async #discard (states: readonly StateRecord[]): Promise<void> {
    const gone = new Set(states)
    this.#states = this.#states.filter((state) => !gone.has(state))
    await this.#writeIndex()
    const listed = new Set(this.#states.map((state) => state.file))
    for (const state of gone) if (!listed.has(state.file)) await this.#removeFile(state.file)
  }

  /** Writes the index as it is then, atomically (a temp file, synced, renamed over it); writes run one at a time. */
  async #writeIndex (): Promise<void> {
    const write = this.#writing.then(async () => {
      this.#touched = false
      const temp = join(this.#dir, `${INDEX_FILE}.${randomBytes(8).toString('hex')}.tmp`)
      const handle = await open(temp, 'w', 0o600)
      try {
        await handle.writeFile(JSON.stringify({ version: INDEX_VERSION, states: this.#states }))
        await handle.sync()
      } finally {
        await handle.close()
      }
      await rename(temp, join(this.#dir, INDEX_FILE))
    })
    this.#writing = write.catch(() => undefined) // the next write does not depend on this one; its caller sees the failure
    await write
  }

  async #removeFile (name: string): Promise<void> {
    await rm(join(this.#dir, name), { force: true }).catch((err: unknown) => { this.#log.warn({ err, file: name }, 'removing a prefix state file failed') })
  }

  async #settled (): Promise<void> {
    await Promise.all([...this.#saving.values()].flatMap((saving) => [...saving]))
  }

  #touch (state: StateRecord): void {
    state.lastUsedAt = this.#tick()
    this.#touched = true
  }

  #tick (): number {
    this.#clock = Math.max(Date.now(), this.#clock + 1)
    return this.#clock
  }
}

/**
 * Runs a save or load of the sequence's state, which takes the context's lock, while other sequences generate.
 * node-llama-cpp's batch loop holds that lock for as long as any decode is queued, so with three streams or more a
 * save waited for all of them to finish; while an erasure of a sequence is pending, the others' next decodes wait
 * (the erasures-take-the-lock patch, patches/node-llama-cpp.ts), the loop lets go, and what queued for the lock
 * runs. Empty erasures of this sequence are kept pending until the work is through: each takes the lock and leaves
 * it at once, and the work, queued for the lock before the decodes resume, runs between them. Without the patch the
 * erasures change nothing.
 */
async function letIn<T> (sequence: CachedSlot['sequence'], work: () => Promise<T>): Promise<T> {
  const running = work()
  let finished = false
  const done = running.then(() => { finished = true }, () => { finished = true })
  let erasure: Promise<void> = Promise.resolve()
  while (!finished) {
    erasure = sequence.eraseContextTokenRanges([])
    await Promise.race([done, erasure])
  }
  await erasure
  return await running
}

function inScope (state: StateRecord, scope: Scope, requester: Requester): boolean {
  return state.requester === requester && state.contextLength === scope.contextLength && state.sequences === scope.sequences && state.flashAttention === scope.flashAttention &&
    state.model.path === scope.model.path && state.model.sizeBytes === scope.model.sizeBytes && state.model.mtimeMs === scope.model.mtimeMs
}

function groupKey (scope: Scope, requester: Requester): string {
  const { path, sizeBytes, mtimeMs } = scope.model
  return JSON.stringify([path, sizeBytes, mtimeMs, scope.contextLength, scope.sequences, scope.flashAttention, requester])
}

/** The same model, context length, requester and tokens always get the same name. */
function stateFileName (scope: Scope, requester: Requester, tokens: readonly number[]): string {
  return `${createHash('sha256').update(JSON.stringify([groupKey(scope, requester), tokens])).digest('hex')}.state`
}

function commonPrefix (a: readonly number[], b: readonly number[]): number {
  const length = Math.min(a.length, b.length)
  let i = 0
  while (i < length && a[i] === b[i]) i++
  return i
}

function startsWith (tokens: readonly number[], prefix: readonly number[]): boolean {
  return prefix.length <= tokens.length && commonPrefix(tokens, prefix) === prefix.length
}

/** Read in chunks: a state of a large model is many megabytes, and the event loop goes on between them. */
async function sha256File (path: string): Promise<string> {
  const hash = createHash('sha256')
  for await (const chunk of createReadStream(path)) hash.update(chunk as Buffer)
  return hash.digest('hex')
}
