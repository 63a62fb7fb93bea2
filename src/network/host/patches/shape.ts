// Reading the shape of an installed dependency, as the patches of this folder check it before they change anything:
// its version, and whether its files still say what a patch was written against (a constant's value, the call that
// hands a patched value on, a log line). Text is compared with runs of whitespace collapsed, so that a reformatted
// file still matches and a changed statement does not.
import { readFileSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import type { PatchReport } from '../../../system/patch-report.ts'

/** The folder of an installed package: the nearest one above its entry point whose package.json has its name. */
function packageRoot (name: string): string {
  let dir = dirname(fileURLToPath(import.meta.resolve(name)))
  for (;;) {
    try {
      const manifest = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as { name?: unknown }
      if (manifest.name === name) return dir
    } catch (err) {
      // No package.json at this level (a dist folder): look further up
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err
    }
    const parent = dirname(dir)
    if (parent === dir) throw new Error(`no package.json of ${name} above its entry point`)
    dir = parent
  }
}

/** `name version` of each installed package, comma-separated: a report's `dependency`. */
export function installed (...names: string[]): string {
  return names.map((name) => {
    const manifest = JSON.parse(readFileSync(join(packageRoot(name), 'package.json'), 'utf8')) as { version?: unknown }
    return `${name} ${String(manifest.version)}`
  }).join(', ')
}

function collapsed (text: string): string {
  return text.replace(/\s+/g, ' ')
}

/**
 * The first of `fragments` (pieces of source text) that a file of an installed package no longer contains, as a
 * report's detail: `@libp2p/dcutr dist/src/dcutr.js no longer has "const DCUTR_DIAL_PRIORITY = 100;"`. Null when the
 * file has each one.
 */
export function missingText (name: string, path: string, fragments: readonly string[]): string | null {
  let text: string
  try {
    text = collapsed(readFileSync(join(packageRoot(name), path), 'utf8'))
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return `${name} has no ${path}`
    throw err
  }
  const missing = fragments.find((fragment) => !text.includes(collapsed(fragment)))
  return missing == null ? null : `${name} ${path} no longer has "${collapsed(missing)}"`
}

/** The first problem of `checks` (each a detail or null), run in order until one finds something. */
export function firstProblem (checks: ReadonlyArray<() => string | null>): string | null {
  for (const check of checks) {
    const problem = check()
    if (problem != null) return problem
  }
  return null
}

/** A report: active when `problem` is null, else inactive with it as the detail. */
export function reportOf (patch: Omit<PatchReport, 'active' | 'detail'>, problem: string | null): PatchReport {
  return problem == null ? { ...patch, active: true } : { ...patch, active: false, detail: problem }
}
