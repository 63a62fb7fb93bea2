import { homedir } from 'node:os'
import { join } from 'node:path'
import { readFileSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import type { DemandDrivenModelsOptions } from './models/index.ts'
import type { PeerNetworkOptions } from './network/index.ts'
import type { AgentServiceOptions } from './agent/index.ts'
import type { ConnectionLimits } from './http/connections.ts'
import type { LogFormat } from './log-format.ts'
import {
  DEFAULT_CONTEXT_SIZE, DEFAULT_KEEP_ALIVE_MS, DEFAULT_MAX_LOADED_MODELS, DEFAULT_PREFIX_STATE_BUDGET_BYTES, DEFAULT_QUEUE_SIZE, DEFAULT_SLOTS, type FlashAttention,
  type GpuChoice
} from './inference/index.ts'

export const DEFAULT_PORT = 11435
export const DEFAULT_HOST = '127.0.0.1'
/** The local admin token's file in the data dir; the CLI reads it, the node writes it at start. */
export const ADMIN_TOKEN_FILE = 'admin-token'

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
  /** `serve --flash-attention`: llama.cpp's flash attention (auto, on, off). */
  flashAttention: FlashAttention
  /** `serve --max-loaded-models`: models held in memory at once. */
  maxLoadedModels: number
  /** `serve --keep-alive`: ms a model loaded for a request stays after its last one (0: right after; -1: never). */
  keepAliveMs: number
  /** `serve --memory-budget`: bytes the loaded models may take together; null: what the machine has available. */
  memoryBudgetBytes: number | null
  /**
   * `serve --prefix-cache-gb`: bytes the long prompt prefixes saved in `<dataDir>/prefix-states` may take (0 keeps
   * none), least recently used evicted first. Default 2 GiB.
   */
  prefixStateBudgetBytes: number
  /**
   * `--reset-identity`: start even though the node key or the database is missing beside the other (a new key, or a
   * fresh database, bound together). Without it such a start is refused.
   */
  resetIdentity: boolean
  /** How long closing the node waits for requests in flight before cutting their connections. */
  shutdownGraceMs: number
  allowedOrigins: string[]
  allowedHosts: string[]
  logLevel: string
  /** JSON lines (the default, for machines) or human lines (`serve` picks it for a terminal). */
  logFormat?: LogFormat
  /** Base URL of the model hub (`$HF_ENDPOINT`, default https://huggingface.co); tests point it at a fake hub. */
  hfEndpoint: string
  /** `$HF_TOKEN`, sent to the hub for gated or private repos; null when unset. */
  hfToken: string | null
  /**
   * A model to load at start (`serve --model`): an absolute path to a GGUF file (imported in place) or a model id
   * (downloaded first if need be). Null: the model loaded when the node last stopped, if any.
   */
  model?: string | null
  /** `serve --gpu`: the llama.cpp backend (default `auto`: the best installed one that works, else the CPU). */
  gpu?: GpuChoice
  /** Disk a model download must leave free (default 256 MiB); tests raise it to see a full disk refused. */
  diskHeadroomBytes?: number
  /**
   * Where the API listens on the network while `allow_network_access` is on (`--network-host`): one address, or null
   * for every non-loopback address of the machine. `host` (loopback by default) is listened on always.
   */
  networkHost: string | null
  /** `--tls-cert` and `--tls-key` (PEM files): the network listeners speak HTTPS. Null: HTTP. */
  tls: { certFile: string, keyFile: string } | null
  /** libp2p listen multiaddrs; null: loopback TCP and WebSocket on free ports (reachable from elsewhere via the relay). */
  p2pListen: string[] | null
  /** Peer network tunables (heartbeat, WAN sync and backoff, demand-driven models); tests and the bench shorten them. */
  network?: Omit<PeerNetworkOptions, 'listen'> & { demand?: DemandDrivenModelsOptions }
  /** HTTP timeouts and the per-address connection cap (defaults in src/http/connections.ts); tests shorten them. */
  http?: Partial<ConnectionLimits>
  /** Agent tunables (answer length, timeouts); tests shorten them. */
  agent?: AgentServiceOptions
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
    slots: DEFAULT_SLOTS,
    queueSize: DEFAULT_QUEUE_SIZE,
    contextSize: DEFAULT_CONTEXT_SIZE,
    flashAttention: 'auto',
    maxLoadedModels: DEFAULT_MAX_LOADED_MODELS,
    keepAliveMs: DEFAULT_KEEP_ALIVE_MS,
    memoryBudgetBytes: null,
    prefixStateBudgetBytes: DEFAULT_PREFIX_STATE_BUDGET_BYTES,
    shutdownGraceMs: 10_000,
    resetIdentity: false,
    allowedOrigins: [],
    allowedHosts: [],
    logLevel: process.env.MESHNODE_LOG_LEVEL ?? 'info',
    p2pListen: null,
    networkHost: null,
    tls: null,
    hfEndpoint: process.env.HF_ENDPOINT == null || process.env.HF_ENDPOINT === '' ? 'https://huggingface.co' : process.env.HF_ENDPOINT,
    hfToken: process.env.HF_TOKEN == null || process.env.HF_TOKEN === '' ? null : process.env.HF_TOKEN,
    ...overrides
  }
}

/** Where `npm install` (the `prepare` script) puts the dashboard Vite built; the node serves it at `/`. */
export const DASHBOARD_DIR: string = fileURLToPath(new URL('../dashboard/dist', import.meta.url))

export const VERSION: string = (JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string }).version
