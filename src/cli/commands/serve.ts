import { existsSync } from 'node:fs'
import { homedir } from 'node:os'
import { join, resolve } from 'node:path'
import type { Command } from 'commander'
import type { RunningNode } from '../../node.ts'
import { DEFAULT_CONTEXT_SIZE, DEFAULT_MAX_LOADED_MODELS, DEFAULT_QUEUE_SIZE, DEFAULT_SLOTS, FLASH_ATTENTION_CHOICES, GPU_CHOICES, type FlashAttention, type GpuChoice } from '../../inference/index.ts'
import { DEFAULT_HOST, DEFAULT_PORT, defaultConfig, defaultDataDir } from '../../config.ts'
import { UsageError, logSettings, wholeNumber, withLogOptions } from './common.ts'

interface ServeOptions {
  port: string
  host: string
  dataDir: string
  name?: string
  threads?: string
  slots?: string
  queueSize?: string
  contextSize?: string
  flashAttention?: string
  maxLoadedModels?: string
  keepAlive?: string
  memoryBudget?: string
  prefixCacheGb?: string
  allowedOrigin: string[]
  allowedHost: string[]
  p2pListen: string[]
  model?: string
  resetIdentity?: boolean
  networkHost?: string
  tlsCert?: string
  tlsKey?: string
  logFormat: string
  logLevel?: string
  gpu: string
}

/** How long the last-resort handler gives the node to close its database and port before exiting anyway. */
const LAST_RESORT_CLOSE_MS = 5_000

/**
 * How long after the signal that began the stop another one forces the exit. Sooner, it is the same stop arriving
 * twice: a terminal sends Ctrl-C's SIGINT to its whole foreground group, so under `npm start` the node gets it from
 * the terminal and again as npm forwards it. A person's second Ctrl-C comes later than this.
 */
export const FORCE_AFTER_MS = 1_000

/** What the launcher watch passes to stop(): not a signal, so never a reason to force the exit. */
const LAUNCHER_GONE = 'launcher gone'

export function registerServe (program: Command): void {
  withLogOptions(program.command('serve'))
    .description('run the node in the foreground')
    .option('--port <port>', 'HTTP port', String(DEFAULT_PORT))
    .option('--host <host>', 'address to listen on (loopback unless you mean to expose the node)', DEFAULT_HOST)
    .option('--data-dir <dir>', 'where the database, node key, models and admin-token live', defaultDataDir())
    .option('--name <name>', 'display name of this node')
    .option('--threads <n>', 'llama.cpp threads (default: one less than the cores, at most 4)')
    .option('--slots <n>', `requests the loaded model serves at once (default ${DEFAULT_SLOTS})`)
    .option('--queue-size <n>', `requests that may wait for a slot before new ones get 429 (default ${DEFAULT_QUEUE_SIZE})`)
    .option('--context-size <tokens>', `context tokens per slot, capped at the model's own (default ${DEFAULT_CONTEXT_SIZE})`)
    .option('--flash-attention <mode>', `llama.cpp's flash attention: ${FLASH_ATTENTION_CHOICES.join(', ')} (default auto: wherever the backend supports it, as llama-server, except for generation on the CPU, where it is off)`)
    .option('--max-loaded-models <n>', `models held in memory at once (default ${DEFAULT_MAX_LOADED_MODELS})`)
    .option('--keep-alive <duration>', 'how long a model loaded for a request stays after its last one: 30s, 10m, 1h, 0 (unload right after) or -1 (never) (default 10m); models loaded with `models load` or --model stay')
    .option('--memory-budget <GiB>', 'memory the loaded models may take together, by node-llama-cpp\'s estimate of each model and context (default: what the machine has available when the first model loads, RAM plus free VRAM)')
    .option('--prefix-cache-gb <GiB>', 'disk the long prompt prefixes saved for agents may take, so that a swap or restart does not evaluate them again (default 2; 0 keeps none)')
    .option('--allowed-origin <origin>', 'browser origin allowed to call the API (repeatable)', collect, [])
    .option('--allowed-host <host>', 'extra host name the API may be addressed by (repeatable)', collect, [])
    .option('--model <path|id>', 'load this model at start: a GGUF file (imported where it is) or a model id (downloaded first if need be)')
    .option('--gpu <backend>', `llama.cpp backend: ${GPU_CHOICES.join(', ')} (auto: the best installed one that works, else the CPU)`, 'auto')
    .option('--p2p-listen <multiaddr>', 'peer-to-peer listen address, e.g. /ip4/0.0.0.0/tcp/4002 (repeatable; default: loopback only)', collect, [])
    .option('--network-host <address>', 'where to listen on the network while allow_network_access is on (default: every address of this machine)')
    .option('--tls-cert <file>', 'PEM certificate: the network listeners speak HTTPS (with --tls-key)')
    .option('--tls-key <file>', 'PEM private key of --tls-cert')
    .option('--reset-identity', 'start even though node.key or meshnode.db is missing beside the other: a new key, or a fresh database (see docs/API.md, Identity)')
    .action(async (options: ServeOptions) => {
      const port = wholeNumber('--port', options.port, 0, 65535)
      const defaults = defaultConfig()
      const config = defaultConfig({
        ...logSettings(options),
        port,
        host: options.host,
        dataDir: options.dataDir,
        name: options.name ?? null,
        threads: options.threads == null ? null : wholeNumber('--threads', options.threads, 1, 256),
        slots: options.slots == null ? defaults.slots : wholeNumber('--slots', options.slots, 1, 64),
        queueSize: options.queueSize == null ? defaults.queueSize : wholeNumber('--queue-size', options.queueSize, 0, 10_000),
        contextSize: options.contextSize == null ? defaults.contextSize : wholeNumber('--context-size', options.contextSize, 128, 1_048_576),
        flashAttention: options.flashAttention == null ? defaults.flashAttention : flashAttention(options.flashAttention),
        maxLoadedModels: options.maxLoadedModels == null ? defaults.maxLoadedModels : wholeNumber('--max-loaded-models', options.maxLoadedModels, 1, 64),
        keepAliveMs: options.keepAlive == null ? defaults.keepAliveMs : keepAlive(options.keepAlive),
        memoryBudgetBytes: options.memoryBudget == null ? null : memoryBudget(options.memoryBudget),
        prefixStateBudgetBytes: options.prefixCacheGb == null ? defaults.prefixStateBudgetBytes : prefixCache(options.prefixCacheGb),
        allowedOrigins: options.allowedOrigin,
        allowedHosts: options.allowedHost,
        p2pListen: options.p2pListen.length > 0 ? options.p2pListen : null,
        model: options.model == null ? null : modelArgument(options.model),
        resetIdentity: options.resetIdentity === true,
        networkHost: options.networkHost ?? null,
        tls: tlsFiles(options),
        gpu: gpuChoice(options.gpu)
      })
      // Signals are handled from before the start: one that arrives while the node starts (after it logged that it
      // listens, say) stops it gracefully as soon as the start is over, instead of killing it half-built
      let node: RunningNode | null = null
      let stopping: number | null = null // when the stop began (performance.now())
      let pending: string | null = null
      const stop = (signal: string): void => {
        if (stopping != null) {
          if (signal === LAUNCHER_GONE || performance.now() - stopping < FORCE_AFTER_MS) return
          process.stderr.write('meshnode: forced exit\n')
          process.exit(130)
        }
        stopping = performance.now()
        if (node == null) {
          pending = signal
          return
        }
        node.log.info({ signal }, 'shutting down: finishing requests in flight')
        node.close().then(() => { process.exitCode = 0 }, (err: unknown) => {
          process.stderr.write(`meshnode: shutdown failed: ${(err as Error).message}\n`)
          process.exitCode = 1
        })
      }
      // SIGHUP too: a supervisor or a closed terminal means "stop", and its default would skip the graceful close
      for (const signal of ['SIGTERM', 'SIGINT', 'SIGHUP'] as const) process.on(signal, () => { stop(signal) })
      try {
        // Imported here, not at the top: client commands share this program and should not load the whole node.
        const { startNode } = await import('../../node.ts')
        node = await startNode(config)
      } catch (err) {
        const code = (err as NodeJS.ErrnoException).code
        if (code === 'EADDRINUSE') {
          process.stderr.write(`meshnode: port ${port} on ${config.host} is already in use (is another node running?). Choose another with --port.\n`)
        } else {
          process.stderr.write(`meshnode: cannot start: ${(err as Error).message}\n`)
        }
        process.exitCode = 1
        return
      }
      if (pending != null) {
        stopping = null // the stop asked for during the start begins now
        stop(pending)
      }
      watchLauncher(() => { stop(LAUNCHER_GONE) })
      // The last resort: every engine call and peer stream is guarded where it runs, so reaching here means
      // state we cannot vouch for. Log it, close what can be closed in a few seconds, and exit non-zero so that a
      // supervisor (systemd, Docker, pm2) starts a clean node, rather than serving on in an unknown state.
      const running = node
      let failing = false
      const fatal = (kind: string) => (err: unknown): void => {
        if (failing) return
        failing = true
        running.log.fatal({ err, kind }, 'unexpected failure: the node stops so that its supervisor can restart it')
        const deadline = setTimeout(() => process.exit(1), LAST_RESORT_CLOSE_MS)
        deadline.unref()
        running.close().finally(() => process.exit(1)).catch(() => process.exit(1))
      }
      process.on('uncaughtException', fatal('uncaughtException'))
      process.on('unhandledRejection', fatal('unhandledRejection'))
    })
}

/** How often the node looks whether the process that launched it is still there. */
const LAUNCHER_CHECK_MS = 1000

/**
 * Stops the node when the process that launched it is gone: `npm start` (npm forwards SIGTERM and SIGINT, but dies
 * of a SIGHUP) or bin/meshnode.js under an old system Node (it forwards signals, but cannot forward a SIGKILL).
 * Then nobody holds this node's PID or can stop it, so it stops itself, gracefully. A node started any other way
 * (a supervisor, `nohup`) is left alone when its parent goes.
 */
function watchLauncher (stop: () => void): void {
  const launcher = Number(process.env.MESHNODE_LAUNCHER_PID)
  const launched = process.env.npm_lifecycle_event != null || (Number.isSafeInteger(launcher) && launcher > 0 && launcher !== process.pid)
  if (!launched) return
  const parent = process.ppid
  const timer = setInterval(() => {
    if (process.ppid === parent) return
    clearInterval(timer)
    stop()
  }, LAUNCHER_CHECK_MS)
  timer.unref()
}

/** A file that exists (or a path-like argument) becomes an absolute path, for the node to import; anything else is an id. */
function modelArgument (value: string): string {
  const looksLikePath = value.startsWith('.') || value.startsWith('/') || value.startsWith('~') || existsSync(value)
  if (!looksLikePath) return value
  return resolve(value.startsWith('~/') ? join(homedir(), value.slice(2)) : value)
}

function tlsFiles (options: ServeOptions): { certFile: string, keyFile: string } | null {
  if (options.tlsCert == null && options.tlsKey == null) return null
  if (options.tlsCert == null || options.tlsKey == null) throw new UsageError('--tls-cert and --tls-key go together')
  return { certFile: options.tlsCert, keyFile: options.tlsKey }
}

function gpuChoice (value: string): GpuChoice {
  if (!(GPU_CHOICES as readonly string[]).includes(value)) throw new UsageError(`--gpu must be one of ${GPU_CHOICES.join(', ')}, not ${value}`)
  return value as GpuChoice
}

function flashAttention (value: string): FlashAttention {
  if (!(FLASH_ATTENTION_CHOICES as readonly string[]).includes(value)) {
    throw new UsageError(`--flash-attention must be one of ${FLASH_ATTENTION_CHOICES.join(', ')}, not ${value}`)
  }
  return value as FlashAttention
}

/** `--keep-alive` as Ollama's `keep_alive` takes it: a number of seconds, or with a unit (s, m, h); 0 and -1 as they are. */
export function keepAlive (value: string): number {
  const match = /^\s*(-1|\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$/.exec(value)
  if (match == null) throw new UsageError(`--keep-alive must be a duration like 30s, 10m or 1h, 0 (unload right after a request) or -1 (never), not ${value}`)
  if (match[1] === '-1') return -1
  const unit = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 }[match[2] ?? 's'] ?? 1000
  const ms = Math.round(Number(match[1]) * unit)
  if (!Number.isSafeInteger(ms) || ms > 365 * 24 * 3_600_000) throw new UsageError(`--keep-alive is at most a year, not ${value}`)
  return ms
}

/** `--memory-budget` in GiB (decimals allowed), as bytes. */
function memoryBudget (value: string): number {
  const gib = Number(value)
  if (value.trim() === '' || !Number.isFinite(gib) || gib <= 0 || gib > 1_048_576) throw new UsageError(`--memory-budget must be a number of GiB above 0, like 8 or 0.5, not ${value}`)
  return Math.round(gib * 1024 ** 3)
}

/** `--prefix-cache-gb` in GiB (decimals allowed; 0 keeps none), as bytes. */
function prefixCache (value: string): number {
  const gib = Number(value)
  if (value.trim() === '' || !Number.isFinite(gib) || gib < 0 || gib > 1_048_576) throw new UsageError(`--prefix-cache-gb must be a number of GiB, 0 or more, like 2 or 0.5, not ${value}`)
  return Math.round(gib * 1024 ** 3)
}

function collect (value: string, previous: string[]): string[] {
  return [...previous, value]
}
