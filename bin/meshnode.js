#!/usr/bin/env node
// Runs the TypeScript CLI on Node 24 (type stripping). Under an older system Node, re-runs itself with the Node 24
// that the package pins as a devDependency.
import { spawnSync } from 'node:child_process'
import { existsSync } from 'node:fs'
import { fileURLToPath } from 'node:url'

const main = fileURLToPath(new URL('../src/cli/main.ts', import.meta.url))
const major = Number(process.versions.node.split('.')[0])
if (major >= 24) {
  await import(main)
} else {
  const pinned = fileURLToPath(new URL('../node_modules/node/bin/node', import.meta.url))
  if (!existsSync(pinned)) {
    process.stderr.write(`meshnode needs Node 24 or newer (this is ${process.version}); run npm install in the meshnode folder first.\n`)
    process.exit(1)
  }
  const result = spawnSync(pinned, [main, ...process.argv.slice(2)], { stdio: 'inherit' })
  process.exit(result.status ?? 1)
}
