import { mkdirSync } from 'node:fs'
import { join } from 'node:path'
import type { Command } from 'commander'
import { defaultDataDir } from '../../config.ts'
import { logSettings, wholeNumber, withLogOptions } from './common.ts'

export const DEFAULT_RELAY_PORT = 11436

interface RelayCommandOptions {
  port: string
  host: string
  tcpPort?: string
  dataDir: string
  announce: string[]
  logFormat: string
  logLevel?: string
}

export function registerRelay (program: Command): void {
  withLogOptions(program.command('relay'))
    .description('run a WAN relay: circuit relay for nodes behind NAT, and the directory through which nodes find each other')
    .option('--port <port>', 'WebSocket port nodes connect to (their wan_relay_url is ws://<host>:<port>)', String(DEFAULT_RELAY_PORT))
    .option('--host <ip>', 'IP address to listen on (0.0.0.0 to accept nodes from other machines)', '127.0.0.1')
    .option('--tcp-port <port>', 'also accept libp2p over TCP on this port')
    .option('--data-dir <dir>', 'where the relay key lives (it keeps the relay\'s peer id across restarts)', join(defaultDataDir(), 'relay'))
    .option('--announce <multiaddr>', 'address to announce instead of the listen address, e.g. a public one (repeatable)', collect, [])
    .action(async (options: RelayCommandOptions) => {
      const port = wholeNumber('--port', options.port, 0, 65535)
      const tcpPort = options.tcpPort == null ? null : wholeNumber('--tcp-port', options.tcpPort, 0, 65535)
      const { logFormat, logLevel } = logSettings(options)
      // Imported here, not at the top: every other command would pay for loading libp2p.
      const [{ loadOrCreateIdentity }, { createLogger }, { peerIdFromIdentity, startRelay }, { lockDataDir, DataDirInUseError }] = await Promise.all([
        import('../../identity/index.ts'), import('../../log.ts'), import('../../network/index.ts'), import('../../store/index.ts')
      ])
      const log = createLogger(logLevel, undefined, logFormat)
      mkdirSync(options.dataDir, { recursive: true, mode: 0o700 })
      // One relay per data dir: two relays started with the default one would share its key, and nodes, which tell
      // peers apart by key, would take them for one relay (each node reaching one of them only).
      let unlock: () => void
      try {
        unlock = lockDataDir(options.dataDir)
      } catch (err) {
        if (!(err instanceof DataDirInUseError)) throw err
        process.stderr.write(`meshnode: the relay data dir ${options.dataDir} is in use by another running meshnode (PID ${err.pid}); each relay needs a data dir, and a key, of its own: start this one with another --data-dir.\n`)
        process.exitCode = 1
        return
      }
      process.on('exit', unlock)
      // The relay's own key, in its own data dir: a node's key must never double as a relay's.
      const identity = loadOrCreateIdentity(options.dataDir)
      // Signals are handled from here on: one that arrives while the relay starts stops it as soon as it has started
      let stopping = false
      let relay: Awaited<ReturnType<typeof startRelay>> | null = null
      const stop = (signal: string): void => {
        if (stopping) process.exit(130)
        stopping = true
        log.info({ signal }, 'relay shutting down')
        if (relay == null) return // not started yet: it stops right after
        relay.stop().then(() => { process.exitCode = 0 }, (err: unknown) => {
          process.stderr.write(`meshnode: relay shutdown failed: ${(err as Error).message}\n`)
          process.exitCode = 1
        })
      }
      for (const signal of ['SIGTERM', 'SIGINT', 'SIGHUP'] as const) process.on(signal, () => { stop(signal) })
      try {
        relay = await startRelay({
          port,
          host: options.host,
          tcpPort,
          seed: identity.seed,
          announce: options.announce.length > 0 ? options.announce : undefined,
          log
        })
      } catch (err) {
        const code = (err as NodeJS.ErrnoException).code
        process.stderr.write(code === 'EADDRINUSE'
          ? `meshnode: port ${options.port} on ${options.host} is already in use. Choose another with --port.\n`
          : `meshnode: cannot start the relay: ${(err as Error).message}\n`)
        process.exitCode = 1
        return
      }
      log.info({ url: relay.url, peerId: peerIdFromIdentity(identity).toString() }, `relay ready: set wan_relay_url to ${relay.url} on the nodes`)
      if (stopping) {
        stopping = false
        stop('a signal during start')
      }
    })
}

function collect (value: string, previous: string[]): string[] {
  return [...previous, value]
}
