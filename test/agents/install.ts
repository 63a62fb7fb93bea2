// Installs the coding agents the agent tests drive, at pinned versions, into .agents/ (ignored by git): they are large
// (Claude Code's binary alone is ~400 MB), so they are not devDependencies that every `npm install` would fetch.
// npm 11 skips install scripts, and Claude Code's links its platform's binary: it is run here.
import { execFileSync } from 'node:child_process'
import { existsSync } from 'node:fs'
import { join } from 'node:path'
import { AGENTS, AGENTS_DIR } from './agents.ts'

const missing = Object.values(AGENTS).filter((agent) => !existsSync(join(AGENTS_DIR, 'node_modules', agent.package, 'package.json')))
if (missing.length > 0) {
  const specs = missing.map((agent) => `${agent.package}@${agent.version}`)
  process.stdout.write(`installing ${specs.join(', ')} into ${AGENTS_DIR}\n`)
  execFileSync('npm', ['install', '--prefix', AGENTS_DIR, '--no-save', '--no-audit', '--no-fund', '--loglevel=error', ...specs], { stdio: 'inherit' })
}
for (const agent of Object.values(AGENTS)) {
  if (agent.postinstall != null) execFileSync(process.execPath, [agent.postinstall], { cwd: join(AGENTS_DIR, 'node_modules', agent.package), stdio: 'inherit' })
}
