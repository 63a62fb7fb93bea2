// What a LocalEngine is configured with and reports: its options and their defaults (the node's defaults too:
// src/config.ts, `serve`), the events it sends, and its figures.
import type { FlashAttention } from './flash-attention.ts'
import type { LoadedModelInfo, LoadReason } from './model-instance.ts'

export interface LocalEngineOptions {
  /** llama.cpp threads. Default: `os.availableParallelism() - 1`, between 1 and 4 (more oversubscribes small machines). */
  threads?: number
  /** Generations one model runs in parallel, each on its own context sequence. @default DEFAULT_SLOTS (2) */
  slots?: number
  /** Requests that may wait for one model's slot; the next one gets QueueFullError. @default DEFAULT_QUEUE_SIZE (16) */
  queueSize?: number
  /** Tokens one request may use, prompt and answer together, capped at the model's training context. @default DEFAULT_CONTEXT_SIZE (4096) */
  contextSize?: number
  /** llama.cpp's flash attention for the models' contexts, generation and embeddings (`serve --flash-attention`). @default 'auto' */
  flashAttention?: FlashAttention
  /** Models held in memory at once (`serve --max-loaded-models`). @default DEFAULT_MAX_LOADED_MODELS (3) */
  maxLoadedModels?: number
  /**
   * Bytes the loaded models may take together, by node-llama-cpp's estimate of each model and its context
   * (`serve --memory-budget`). Default: what the machine has available when the first model loads (Linux's
   * MemAvailable, else free memory, plus the GPU's free VRAM), so that models never push it into swap.
   */
  memoryBudgetBytes?: number
  /**
   * How long a model loaded for a request stays after its last request settles (`serve --keep-alive`): 0 unloads it
   * right after, -1 never. Models loaded explicitly stay until unloaded. @default DEFAULT_KEEP_ALIVE_MS (10 minutes)
   */
  keepAliveMs?: number
  /** Where slots' long prefixes are saved before they are lost, to be restored later (prefix-states.ts). Default: none saved. */
  prefixStateDir?: string
  /** Disk those states may take, least recently used evicted first (`serve --prefix-cache-gb`). @default DEFAULT_PREFIX_STATE_BUDGET_BYTES (2 GiB) */
  prefixStateBudgetBytes?: number
  /** Fewest tokens a prefix holds to be saved, and shares with a prompt to be restored. @default PREFIX_STATE_MIN_TOKENS (1024) */
  prefixStateMinTokens?: number
}

export interface LoadOptions {
  /** `explicit` (the default: `load`, `serve --model`) stays until unloaded; `request` may be evicted, and unloads after the keep-alive. */
  reason?: LoadReason
}

/** Why a model left memory: unloaded by the caller, evicted for another, idle past the keep-alive, or the engine closing. */
export type UnloadReason = 'explicit' | 'evicted' | 'idle' | 'closing'

export interface LocalEngineEvents {
  loaded: [event: { info: LoadedModelInfo, reason: LoadReason }]
  unloaded: [event: { modelID: string, reason: UnloadReason }]
  /** What `stats()` counts changed: a slot of a loaded model taken or freed, a request queued or out of the queue. */
  stats: []
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
/** Models in memory at once, as Ollama's default on a CPU. */
export const DEFAULT_MAX_LOADED_MODELS = 3
/** How long a model loaded for a request stays after its last one, as Ollama's `keep_alive`. */
export const DEFAULT_KEEP_ALIVE_MS = 10 * 60_000
