// The coding agents and agent libraries the agent tests drive, pinned, and where test/agents/install.ts puts them.
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'

export const AGENTS_DIR = join(import.meta.dirname, '..', '..', '.agents')

/** A package installed into .agents/; `postinstall` is its install script, which npm 11 skips, run by install.ts. */
interface AgentPackage { package: string, version: string, postinstall?: string }
/** A program: `bin` is its executable in the package; `runtime: 'node'` when it is a script that Node runs. */
interface AgentProgram extends AgentPackage { bin: string, runtime?: 'node' }
/** A library the test imports from .agents/node_modules (it is no dependency of ours, so a bare import cannot find it). */
interface AgentLibrary extends AgentPackage { library: true }

export const AGENTS = {
  claudeCode: { package: '@anthropic-ai/claude-code', version: '2.1.332', bin: 'bin/claude.exe', postinstall: 'install.cjs' },
  // A JS launcher that execs the native binary of the platform's package (`@openai/codex-linux-x64`, an optional
  // dependency of the same version, with no install script): run through Node, as the `codex` npm links is
  codex: { package: '@openai/codex', version: '0.171.0', bin: 'bin/codex.js', runtime: 'node' },
  openaiAgents: { package: '@openai/agents', version: '0.20.0', library: true }
} as const satisfies Record<string, AgentProgram | AgentLibrary>

type ProgramName = { [K in keyof typeof AGENTS]: typeof AGENTS[K] extends AgentProgram ? K : never }[keyof typeof AGENTS]
type LibraryName = { [K in keyof typeof AGENTS]: typeof AGENTS[K] extends AgentLibrary ? K : never }[keyof typeof AGENTS]

/** The agent's executable, once installed. */
export function agentBinary (agent: ProgramName): string {
  const { package: name, bin } = AGENTS[agent]
  return join(AGENTS_DIR, 'node_modules', name, bin)
}

/** How to run the agent: its executable, or this Node and its script. */
export function agentCommand (agent: ProgramName): { command: string, args: string[] } {
  const bin = agentBinary(agent)
  const spec: AgentProgram = AGENTS[agent]
  return spec.runtime === 'node' ? { command: process.execPath, args: [bin] } : { command: bin, args: [] }
}

/** The package.json of a library agent, once installed: whether it is there. */
export function agentLibraryManifest (agent: LibraryName): string {
  return join(AGENTS_DIR, 'node_modules', AGENTS[agent].package, 'package.json')
}

/**
 * Imports a package installed in .agents/node_modules (a library agent, or one of its dependencies, such as the
 * `openai` client and the `zod` it was built against) by the file URL of its ESM entry: what a bare `import` from a
 * module in .agents/ would load, so that its own imports resolve there too and it shares their instances.
 */
export async function importFromAgents (name: string): Promise<unknown> {
  const dir = join(AGENTS_DIR, 'node_modules', name)
  const manifest = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as { exports?: unknown, module?: string, main?: string }
  const entry = esmEntry(manifest.exports) ?? manifest.module ?? manifest.main ?? 'index.js'
  return await import(pathToFileURL(join(dir, entry)).href)
}

/** The `.` export under the conditions Node's `import` matches (import, node, default), first listed first. */
function esmEntry (exports: unknown): string | null {
  if (typeof exports === 'string') return exports
  if (exports == null || typeof exports !== 'object') return null
  const conditions = exports as Record<string, unknown>
  if ('.' in conditions) return esmEntry(conditions['.'])
  for (const [condition, target] of Object.entries(conditions)) {
    if (condition === 'import' || condition === 'node' || condition === 'default') {
      const found = esmEntry(target)
      if (found != null) return found
    }
  }
  return null
}
