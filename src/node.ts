import { randomBytes } from 'node:crypto'
import { mkdirSync } from 'node:fs'
import { join } from 'node:path'
import type { Logger } from 'pino'
import { VERSION, type NodeConfig } from './config.ts'
import { buildHttpApp } from './http/app.ts'
import type { HttpApp } from './http/types.ts'
import { loadOrCreateIdentity, type NodeIdentity } from './identity/index.ts'
import { ApiKeys } from './keys/index.ts'
import { LocalEngine, LocalRouter, defaultInferenceThreads } from './inference/index.ts'
import { createLogger } from './log.ts'
import { MetricsRegistry } from './metrics/index.ts'
import { SettingsStore } from './settings/index.ts'
import { openDatabase, writeFileAtomic, type Database } from './store/index.ts'
import { availableParallelism } from 'node:os'
import { detectHardware } from './system/hardware.ts'
import { KeepAwake } from './system/keep-awake.ts'

export const DATABASE_FILE = 'meshnode.db'
export const ADMIN_TOKEN_FILE = 'admin-token'
/** How often `lastUsed` of API keys is written: often enough to be useful, never per request. */
const KEY_USAGE_FLUSH_MS = 10_000

export interface RunningNode {
  readonly identity: NodeIdentity
  readonly http: HttpApp
  readonly db: Database
  readonly log: Logger
  /** Base URL of the HTTP API, e.g. http://127.0.0.1:11435 */
  readonly url: string
  readonly port: number
  readonly adminToken: string
  readonly engine: LocalEngine
  /** Stops accepting requests, finishes the ones in flight, stops every part and closes the database. */
  close (): Promise<void>
}

/** The composition root: builds every part of the node from its config, wires them, and starts listening. */
export async function startNode (config: NodeConfig, options: { logDestination?: NodeJS.WritableStream } = {}): Promise<RunningNode> {
  const log = createLogger(config.logLevel, options.logDestination)
  mkdirSync(config.dataDir, { recursive: true, mode: 0o700 })
  const identity = loadOrCreateIdentity(config.dataDir)
  const db = openDatabase(join(config.dataDir, DATABASE_FILE))
  const cleanups: Array<() => Promise<void> | void> = [() => { db.close() }]
  try {
    const adminToken = randomBytes(32).toString('base64url')
    writeFileAtomic(join(config.dataDir, ADMIN_TOKEN_FILE), adminToken + '\n', 0o600)

    const startedAt = Date.now()
    const uptimeSeconds = (): number => Math.round((Date.now() - startedAt) / 1000)
    const name = config.name ?? `meshnode-${identity.nodeID.slice(0, 8)}`
    const hardware = detectHardware()
    const metrics = new MetricsRegistry()
    const settings = new SettingsStore({ db })
    const keys = new ApiKeys({ db }, { adminToken })
    const keepAwake = new KeepAwake({ log: log.child({ part: 'keep-awake' }) })
    const engine = new LocalEngine({ log: log.child({ part: 'engine' }) }, {
      threads: config.threads ?? defaultInferenceThreads(availableParallelism()),
      slots: config.slots,
      queueSize: config.queueSize,
      contextSize: config.contextSize
    })
    cleanups.unshift(() => engine.close())
    // TODO(issue 3): the models domain's one normalised matcher replaces this comparison.
    const router = new LocalRouter({ engine, sameModel: (a, b) => a.toLowerCase() === b.toLowerCase() })

    keepAwake.set(settings.get().keep_awake)
    settings.onChange(({ changed, current }) => {
      if (changed.includes('keep_awake')) keepAwake.set(current.keep_awake)
    })
    cleanups.unshift(() => { keepAwake.set(false) })

    const flushUsage = setInterval(() => { keys.flushUsage() }, KEY_USAGE_FLUSH_MS)
    flushUsage.unref()
    cleanups.unshift(() => { clearInterval(flushUsage); keys.flushUsage() })

    let port = config.port
    const http = await buildHttpApp({
      log,
      settings,
      keys,
      metrics,
      router,
      health: () => ({ status: 'ok', version: VERSION, nodeID: identity.nodeID, uptimeSeconds: uptimeSeconds() }),
      snapshot: () => ({
        node: { nodeID: identity.nodeID, name, version: VERSION, port, uptimeSeconds: uptimeSeconds() },
        hardware,
        keepAwake: keepAwake.status(),
        model: null,
        models: [],
        peers: { lan: 0, wan: 0 },
        wallet: { currentBalance: 0 },
        ptn: { memberships: 0 },
        settings: settings.get()
      })
    }, { version: VERSION, allowedOrigins: config.allowedOrigins, allowedHosts: config.allowedHosts })
    cleanups.unshift(() => http.close())

    await http.listen({ host: config.host, port: config.port })
    const address = http.server.address()
    port = typeof address === 'object' && address != null ? address.port : config.port
    const urlHost = config.host.includes(':') ? `[${config.host}]` : config.host
    log.info({ nodeID: identity.nodeID, port, dataDir: config.dataDir }, 'meshnode is listening')

    let closing: Promise<void> | null = null
    return {
      identity,
      http,
      db,
      log,
      url: `http://${urlHost === '0.0.0.0' ? '127.0.0.1' : urlHost}:${port}`,
      port,
      adminToken,
      engine,
      close: () => (closing ??= runCleanups(cleanups, log))
    }
  } catch (err) {
    await runCleanups(cleanups, log)
    throw err
  }
}

/** Runs shutdown steps newest first; one failing step is logged and does not keep the database open. */
async function runCleanups (cleanups: Array<() => Promise<void> | void>, log: Logger): Promise<void> {
  for (const cleanup of cleanups) {
    try {
      await cleanup()
    } catch (err) {
      log.error({ err }, 'shutdown step failed')
    }
  }
}
