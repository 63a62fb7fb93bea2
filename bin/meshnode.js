#!/usr/bin/env node
// Runs the TypeScript CLI on Node 24 (type stripping). Under an older system Node (18 or newer), runs it with the
// Node 24 that the package pins as a devDependency, so that the PID the user started stays the node's for
// supervisors (systemd, Docker, pm2): where the system Node can (22.15+), the process becomes Node 24 in place
// (process.execve, same PID); elsewhere it waits for a child, forwards SIGTERM, SIGINT and SIGHUP to it, and exits
// the way the child did.
import { spawn } from 'node:child_process'
import { existsSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import { serveEnvironment } from './serve-env.js'

const main = fileURLToPath(new URL('../src/cli/main.ts', import.meta.url))
const major = Number(process.versions.node.split('.')[0])
// `serve` runs with a young generation capped at 4 MB per semi-space: V8's default lets it grow to tens of MB while a
// model loads (parsing its GGUF metadata allocates a lot) and never gives it back: memory held for nothing. Token
// generation allocates little, so the smaller space costs nothing measurable (bench/README.md).
// npm start goes through this launcher too.
const serving = process.argv.slice(2).includes('serve')
const V8_FLAGS = serving ? ['--max-semi-space-size=4'] : []
// glibc's malloc arenas and libuv's pool size, set before the node starts (bin/serve-env.js).
const SERVE_ENV = serving ? serveEnvironment(process.env) : {}
const ready = V8_FLAGS.every((flag) => process.execArgv.includes(flag)) && Object.keys(SERVE_ENV).length === 0
if (major >= 24 && ready) {
  await import(main)
} else if (major >= 24 && typeof process.execve === 'function') {
  process.execve(process.execPath, [process.execPath, ...V8_FLAGS, main, ...process.argv.slice(2)], { ...process.env, ...SERVE_ENV })
} else {
  const pinned = fileURLToPath(new URL('../node_modules/node/bin/node', import.meta.url))
  if (!existsSync(pinned)) {
    process.stderr.write(`meshnode needs Node 24 or newer (this is ${process.version}); run npm install in the meshnode folder first.\n`)
    process.exit(1)
  }
  const args = [...V8_FLAGS, main, ...process.argv.slice(2)]
  // The node watches for this launcher's end: if it is killed outright (SIGKILL), the node stops too (see serve)
  const env = { ...process.env, ...SERVE_ENV, MESHNODE_LAUNCHER_PID: String(process.pid) }
  if (typeof process.execve === 'function') process.execve(pinned, [pinned, ...args], env) // returns only on failure
  const child = spawn(pinned, args, { stdio: 'inherit', env })
  // A terminal sends SIGINT (Ctrl-C) and SIGHUP (hang-up) to the child as well as to us: forwarding them there would
  // make two (the node takes a second one within a second for the same Ctrl-C, and a later one as 'force'). SIGTERM
  // comes from kill or a supervisor, to this PID only.
  const fromTerminal = process.stdin.isTTY === true
  for (const signal of ['SIGTERM', 'SIGINT', 'SIGHUP']) {
    process.on(signal, () => {
      if (signal === 'SIGTERM' || !fromTerminal) child.kill(signal)
    })
  }
  child.on('error', (err) => {
    process.stderr.write(`meshnode: cannot start ${pinned}: ${err.message}\n`)
    process.exit(1)
  })
  child.on('exit', (code, signal) => {
    if (signal == null) process.exit(code ?? 1)
    // Ended by a signal: end the same way, so a supervisor sees what it would have seen of the node itself
    process.removeAllListeners(signal)
    process.kill(process.pid, signal)
  })
}
