// The coding agents the agent tests drive, pinned, and where test/agents/install.ts puts them.
import { join } from 'node:path'

export const AGENTS_DIR = join(import.meta.dirname, '..', '..', '.agents')

export const AGENTS = {
  claudeCode: { package: '@anthropic-ai/claude-code', version: '2.1.332', bin: 'bin/claude.exe', postinstall: 'install.cjs' }
} as const satisfies Record<string, { package: string, version: string, bin: string, postinstall?: string }>

/** The agent's executable, once installed. */
export function agentBinary (agent: keyof typeof AGENTS): string {
  const { package: name, bin } = AGENTS[agent]
  return join(AGENTS_DIR, 'node_modules', name, bin)
}
