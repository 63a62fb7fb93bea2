// Installs the coding agents and agent libraries the agent tests drive, at pinned versions, into .agents/ (ignored by
// git): they are large (Claude Code's binary alone is ~400 MB, Codex's ~300 MB), so they are not devDependencies that
// every `npm install` would fetch. npm 11 skips install scripts, and Claude Code's links its platform's binary: it is
// run here. Codex needs none: npm installs its platform's binary as an optional dependency.
import { execFileSync } from 'node:child_process'
import { existsSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { AGENTS, AGENTS_DIR } from './agents.ts'

const installedVersion = (name: string): string | null => {
  const manifest = join(AGENTS_DIR, 'node_modules', name, 'package.json')
  return existsSync(manifest) ? (JSON.parse(readFileSync(manifest, 'utf8')) as { version: string }).version : null
}

const agents = Object.values(AGENTS)
if (agents.some((agent) => installedVersion(agent.package) !== agent.version)) {
  // Every pin, not only the missing ones: without a package.json in .agents/, `npm install --no-save a` removes b
  const specs = agents.map((agent) => `${agent.package}@${agent.version}`)
  process.stdout.write(`installing ${specs.join(', ')} into ${AGENTS_DIR}\n`)
  execFileSync('npm', ['install', '--prefix', AGENTS_DIR, '--no-save', '--no-audit', '--no-fund', '--loglevel=error', ...specs], { stdio: 'inherit' })
}
for (const agent of agents) {
  if ('postinstall' in agent) execFileSync(process.execPath, [agent.postinstall], { cwd: join(AGENTS_DIR, 'node_modules', agent.package), stdio: 'inherit' })
}
