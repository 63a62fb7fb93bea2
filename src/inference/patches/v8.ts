// Every patch meshnode makes to V8, applied here and reported (report.ts). One so far: the garbage collector, which
// heap.ts runs around model loads to give the heap's free pages back.
import { setFlagsFromString } from 'node:v8'
import { runInNewContext } from 'node:vm'
import type { PatchReport } from './report.ts'

/**
 * V8's `gc` with the options it takes (V8 13): `flavor: 'last-resort'` also shrinks the young generation. The options
 * are not checked by V8: one it does not know is ignored, and the collection is then a plain full one.
 */
export type CollectGarbage = (options?: { type?: 'major' | 'minor', execution?: 'sync' | 'async', flavor?: 'regular' | 'last-resort' }) => unknown

// A module-level memo, which the code otherwise avoids, and why: V8's flags are the process's, and the function the
// flag hands out lives in the context it was taken from. One context, made once, serves every caller; a context per
// call would cost a context per collection.
let collector: CollectGarbage | null | undefined

/**
 * `expose-gc`: V8's collector, which it exposes only behind `--expose-gc`. Setting that flag while running makes `gc`
 * exist in contexts created after it, so one new context hands us the function (or the process already has it,
 * started with the flag). Null where that fails: an embedder that refuses the flag, or a V8 that no longer reads it
 * after start.
 */
export function garbageCollector (): CollectGarbage | null {
  if (collector !== undefined) return collector
  const exposed = (globalThis as { gc?: unknown }).gc
  if (typeof exposed === 'function') return (collector = exposed as CollectGarbage)
  setFlagsFromString('--expose-gc')
  const fromContext: unknown = runInNewContext('typeof gc === "function" ? gc : null')
  return (collector = typeof fromContext === 'function' ? fromContext as CollectGarbage : null)
}

/** Applies every V8 patch and says whether each took. */
export function v8Patches (): PatchReport[] {
  const dependency = `V8 ${process.versions.v8}`
  const gc = garbageCollector()
  return [{
    name: 'expose-gc',
    dependency,
    reason: 'without the collector, the garbage a model load leaves (its GGUF metadata, as JavaScript strings) keeps its pages: tens of MB more resident per load',
    active: gc != null,
    ...(gc == null ? { detail: 'no gc function after setting --expose-gc: this V8 ignores the flag once running' } : {})
  }]
}
