// Two rules of the codebase's shape that a linter does not see, checked over every import (`import type` included,
// since a type-level cycle ties two parts together as firmly for a reader): no import cycle, in src/ or in the
// dashboard; and a domain (a folder of src/ with an index.ts) is imported by anything outside it only through that
// index.ts. `npm run lint` runs it after eslint (alone: `npm run lint:imports`): it prints each violation and exits 1
// when there is any.
import { existsSync, readFileSync, readdirSync } from 'node:fs'
import { dirname, join, relative, resolve, sep } from 'node:path'

const IMPORT = /(?:^|[\s;])(?:import|export)\s(?:[^'";]*?\sfrom\s)?['"](\.{1,2}\/[^'"]+)['"]|import\(\s*['"](\.{1,2}\/[^'"]+)['"]\s*\)/g

/** Every .ts / .tsx file under `dir`. */
function sources (dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true, recursive: true })
    .filter((entry) => entry.isFile() && /\.tsx?$/.test(entry.name) && !entry.name.endsWith('.d.ts'))
    .map((entry) => join(entry.parentPath, entry.name))
}

/** The files `file` imports (relative imports only), resolved. */
export function importsOf (file: string): string[] {
  const text = readFileSync(file, 'utf8').replace(/\/\*[\s\S]*?\*\//g, '').replace(/(^|[^:])\/\/.*$/gm, '$1')
  const found: string[] = []
  for (const match of text.matchAll(IMPORT)) {
    const target = resolve(dirname(file), match[1] ?? match[2])
    for (const candidate of [target, `${target}.ts`, `${target}.tsx`, join(target, 'index.ts')]) {
      if (existsSync(candidate) && candidate.match(/\.tsx?$/) != null) {
        found.push(candidate)
        break
      }
    }
  }
  return found
}

/** The cycles among `files` (strongly connected components of more than one file, or a file importing itself). */
export function cycles (graph: Map<string, string[]>): string[][] {
  let index = 0
  const indexes = new Map<string, number>()
  const low = new Map<string, number>()
  const stack: string[] = []
  const onStack = new Set<string>()
  const found: string[][] = []
  const visit = (node: string): void => {
    indexes.set(node, index)
    low.set(node, index)
    index++
    stack.push(node)
    onStack.add(node)
    for (const next of graph.get(node) ?? []) {
      if (!graph.has(next)) continue
      if (!indexes.has(next)) {
        visit(next)
        low.set(node, Math.min(low.get(node) as number, low.get(next) as number))
      } else if (onStack.has(next)) {
        low.set(node, Math.min(low.get(node) as number, indexes.get(next) as number))
      }
    }
    if (low.get(node) === indexes.get(node)) {
      const component: string[] = []
      let member: string
      do {
        member = stack.pop() as string
        onStack.delete(member)
        component.push(member)
      } while (member !== node)
      if (component.length > 1 || (graph.get(node) ?? []).includes(node)) found.push(component.sort())
    }
  }
  for (const node of graph.keys()) if (!indexes.has(node)) visit(node)
  return found
}

/** Imports into a domain of src/ from outside it that do not go through its index.ts. */
export function aroundIndex (root: string, graph: Map<string, string[]>): Array<[string, string]> {
  const src = join(root, 'src')
  const domainOf = (file: string): string | null => {
    const parts = relative(src, file).split(sep)
    return parts.length > 1 && existsSync(join(src, parts[0], 'index.ts')) ? parts[0] : null
  }
  const found: Array<[string, string]> = []
  for (const [file, imports] of graph) {
    for (const target of imports) {
      const domain = domainOf(target)
      if (domain != null && domainOf(file) !== domain && target !== join(src, domain, 'index.ts')) found.push([file, target])
    }
  }
  return found
}

export function check (root: string): string[] {
  const problems: string[] = []
  const name = (file: string): string => relative(root, file)
  for (const dir of ['src', join('dashboard', 'src')]) {
    const graph = new Map(sources(join(root, dir)).map((file) => [file, importsOf(file)]))
    for (const cycle of cycles(graph)) problems.push(`import cycle: ${cycle.map(name).join(' -> ')}`)
    if (dir === 'src') for (const [file, target] of aroundIndex(root, graph)) problems.push(`${name(file)} imports ${name(target)} around its domain's index.ts`)
  }
  return problems
}

if (import.meta.main) {
  const problems = check(resolve(import.meta.dirname, '..'))
  for (const problem of problems) process.stderr.write(`${problem}\n`)
  if (problems.length > 0) {
    process.stderr.write(`${problems.length} import rule violation(s)\n`)
    process.exitCode = 1
  }
}
