import type * as NodeLlamaCpp from 'node-llama-cpp'
import type { Llama } from 'node-llama-cpp'

type LlamaModule = typeof NodeLlamaCpp
let module: Promise<LlamaModule> | null = null

/**
 * node-llama-cpp, imported on first use: the import alone costs ~300 ms and ~60 MB, which a node that serves no
 * model (or has not loaded one yet) should not pay at start.
 */
export async function llamaModule (): Promise<LlamaModule> {
  module ??= import('node-llama-cpp')
  return await module
}

// The one module-level memo STYLE.md §11 allows, and why: node-llama-cpp binds one native llama.cpp backend per
// process. A second getLlama() would load the addon again with its own thread pool and log hooks, and models and
// grammars made by one Llama cannot be used with another (LlamaContext refuses a grammar "created with a different
// Llama instance"). So every LocalEngine in the process, and every test, shares this one.
let shared: Promise<Llama> | null = null

/** The number of threads we give llama.cpp by default: leave one core to Node and the network, never more than 4. */
export function defaultInferenceThreads (cores: number): number {
  return Math.max(1, Math.min(4, cores - 1))
}

/**
 * The process's one Llama, CPU only, never built from source. `threads` caps llama.cpp's thread pool
 * (`maxThreads`): node-llama-cpp's default oversubscribes a small machine and runs 10-500x slower. The first
 * caller creates it; a later caller asking for more threads raises the cap, never lowers it.
 */
export async function getSharedLlama (threads: number): Promise<Llama> {
  if (shared == null) {
    const { getLlama, LlamaLogLevel } = await llamaModule()
    shared = getLlama({
      gpu: false,
      build: 'never',
      usePrebuiltBinaries: true,
      maxThreads: threads,
      progressLogs: false,
      // warn would print llama.cpp's load chatter ("bad special token ...") for every model we open
      logLevel: LlamaLogLevel.error
    }).catch((err: unknown) => {
      shared = null // a failed start (no prebuilt binary) must not poison the memo: the next caller tries again
      throw err
    })
  }
  const llama = await shared
  if (llama.maxThreads < threads) llama.maxThreads = threads
  return llama
}
