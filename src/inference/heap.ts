import { garbageCollector } from './patches/v8.ts'

/**
 * Gives the JavaScript heap's free pages back to the system: a full, memory-reducing collection (V8's "last resort"
 * flavour, which also shrinks the young generation), run around each model load (LocalEngine.load) and after an
 * unload. Loading parses the GGUF's metadata (its whole vocabulary, as JavaScript strings and arrays) and, on a node
 * just started, follows the loading of every module; V8 keeps the pages that garbage took and rarely returns them on
 * its own while timers and sockets keep the process from looking idle. The collection gives those pages back, and the
 * process's RSS goes down with them; each blocks the event loop (three per load), so it runs only around a load, while
 * nothing of the model runs yet (bench/README.md).
 *
 * The collector is V8's, reached through the `expose-gc` patch (patches/v8.ts); where it did not take (reported and
 * warned at start), the heap is left as it is and this returns false.
 */
export function compactHeap (): boolean {
  const collect = garbageCollector()
  if (collect == null) return false
  collect({ type: 'major', execution: 'sync', flavor: 'last-resort' })
  return true
}
