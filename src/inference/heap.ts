import { setFlagsFromString } from 'node:v8'
import { runInNewContext } from 'node:vm'

/** V8's `gc` with the options it takes (V8 13); older engines ignore the options and run a plain full collection. */
type CollectGarbage = (options?: { type?: 'major' | 'minor', execution?: 'sync' | 'async', flavor?: 'regular' | 'last-resort' }) => void

/**
 * Gives the JavaScript heap's free pages back to the system: a full, memory-reducing collection (V8's "last resort"
 * flavour, which also shrinks the young generation), run around each model load (LocalEngine.load) and after an
 * unload. Loading parses the GGUF's metadata (its whole vocabulary, as JavaScript strings and arrays) and, on a node
 * just started, follows the loading of every module; V8 keeps the pages that garbage took and rarely returns them on
 * its own while timers and sockets keep the process from looking idle. Measured with `serve` and the 24M model: 66 MB of heap for 47 MB
 * live; afterwards 42 MB, and the process's RSS 24 MB lower (bench/README.md, memory). Each blocks the event loop
 * for about 0.1 s (three per load), while nothing of the model runs yet.
 *
 * V8 exposes its collector only behind `--expose-gc`; setting that flag now makes `gc` exist in contexts created
 * after it, so one new context hands us the function. Where that fails (an embedder that refuses the flag), the
 * heap is simply left as it is.
 */
export function compactHeap (): boolean {
  const collect = collector()
  if (collect == null) return false
  collect({ type: 'major', execution: 'sync', flavor: 'last-resort' })
  return true
}

function collector (): CollectGarbage | null {
  const exposed = (globalThis as { gc?: unknown }).gc
  if (typeof exposed === 'function') return exposed as CollectGarbage
  setFlagsFromString('--expose-gc')
  const fromContext: unknown = runInNewContext('typeof gc === "function" ? gc : null')
  return typeof fromContext === 'function' ? fromContext as CollectGarbage : null
}
