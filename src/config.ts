import { homedir } from 'node:os'
import { join } from 'node:path'
import { readFileSync } from 'node:fs'

export const DEFAULT_PORT = 11435
export const DEFAULT_HOST = '127.0.0.1'

/** Everything `startNode` needs, as the CLI or a test gives it. */
export interface NodeConfig {
  port: number
  host: string
  dataDir: string
  /** Display name; defaults to the stored name or `meshnode-<first 8 of nodeID>`. */
  name: string | null
  /** llama.cpp threads; null derives it from the machine. */
  threads: number | null
  /** Requests one loaded model serves at once (parallel sequences). */
  slots: number
  /** Requests that may wait for a slot before new ones get 429. */
  queueSize: number
  /** Context tokens per slot (capped at the model's training context). */
  contextSize: number
  allowedOrigins: string[]
  allowedHosts: string[]
  logLevel: string
}

export function defaultDataDir (): string {
  return process.env.MESHNODE_DATA_DIR ?? join(homedir(), '.meshnode')
}

export function defaultConfig (overrides: Partial<NodeConfig> = {}): NodeConfig {
  return {
    port: DEFAULT_PORT,
    host: DEFAULT_HOST,
    dataDir: defaultDataDir(),
    name: null,
    threads: null,
    slots: 2,
    queueSize: 16,
    contextSize: 4096,
    allowedOrigins: [],
    allowedHosts: [],
    logLevel: process.env.MESHNODE_LOG_LEVEL ?? 'info',
    ...overrides
  }
}

export const VERSION: string = (JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string }).version
