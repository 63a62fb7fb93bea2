import type { Llama } from 'node-llama-cpp'
import { patchedNodeLlamaCpp, tokenLoopInternals, type LlamaInternals, type LlamaModule } from './patches/node-llama-cpp.ts'

/**
 * node-llama-cpp, imported on first use: the import alone costs noticeable time and memory (bench/README.md), which a
 * node that serves no model (or has not loaded one yet) should not pay at start. Every patch of its internals is applied then
 * (patches/node-llama-cpp.ts, which says whether each took).
 */
export async function llamaModule (): Promise<LlamaModule> {
  return await patchedNodeLlamaCpp()
}

/** node-llama-cpp's internal parts our token loop drives; null where the `token-loop` patch did not take. */
export async function llamaInternals (): Promise<LlamaInternals | null> {
  return await tokenLoopInternals()
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
 * thread pool (`maxThreads`): node-llama-cpp's default oversubscribes a small machine, which then runs many times
 * slower (bench/README.md). The first caller creates it; a later caller asking for more threads raises the cap, never
 * lowers it.
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
