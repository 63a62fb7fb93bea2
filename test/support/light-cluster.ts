// Many network-layer nodes (light-network.ts) spread over several child processes (light-worker.ts), so that a
// network of 100 or 200 uses every core: for the scale test and bench/network-scale.ts. Nodes are numbered 0..N-1
// across the workers, in the order they were started.
import { fork, type ChildProcess } from 'node:child_process'
import type { PeerNetworkOptions } from '../../src/network/index.ts'
import type { NodeStats, WorkerRequest } from './light-worker.ts'

export type { NodeStats } from './light-worker.ts'

export interface LightClusterOptions {
  relayUrls: string[]
  /** Nodes in all. */
  nodes: number
  /** Child processes to spread them over. @default one per 25 nodes */
  workers?: number
  network?: PeerNetworkOptions
  /** Nodes each worker starts at once. @default 5 */
  batch?: number
  /** Start one batch every this many ms across the whole cluster (the workers take turns), instead of each worker
   *  starting its next batch as soon as the last one is up. */
  startEveryMs?: number
}

class Worker {
  readonly #child: ChildProcess
  readonly #pending = new Map<number, { resolve: (value: unknown) => void, reject: (err: Error) => void }>()
  #next = 0

  constructor () {
    // No stdout: under `node --test` a child's stdout is the test protocol stream.
    this.#child = fork(new URL('./light-worker.ts', import.meta.url), [], { execArgv: [], stdio: ['ignore', 'ignore', 'inherit', 'ipc'] })
    this.#child.on('message', (message: { id: number, result?: unknown, error?: string }) => {
      const pending = this.#pending.get(message.id)
      this.#pending.delete(message.id)
      if (message.error != null) pending?.reject(new Error(`light worker: ${message.error}`))
      else pending?.resolve(message.result)
    })
    // A send to a worker that died is answered by its 'exit' below (every pending call rejected).
    this.#child.on('error', () => {})
    this.#child.on('exit', (code, signal) => {
      for (const pending of this.#pending.values()) pending.reject(new Error(`light worker exited (${code ?? signal})`))
      this.#pending.clear()
    })
  }

  async call<T> (request: WorkerRequest): Promise<T> {
    if (!this.#child.connected) throw new Error(`light worker exited (${this.#child.exitCode ?? this.#child.signalCode})`)
    const id = this.#next++
    const { promise, resolve, reject } = Promise.withResolvers<unknown>()
    this.#pending.set(id, { resolve, reject })
    this.#child.send({ id, request })
    return await promise as T
  }

  async exit (): Promise<void> {
    if (this.#child.exitCode != null || this.#child.signalCode != null) return
    const exited = new Promise(resolve => this.#child.once('exit', resolve))
    this.#child.disconnect()
    await exited
  }
}

/** Where node `index` lives: its worker, and its index there. */
interface Place { worker: Worker, local: number }

export class LightCluster {
  readonly #workers: Worker[]
  readonly #places: Place[] = []
  /** The nodes' nodeIDs, by index. */
  readonly nodeIDs: string[] = []
  #stopped = false

  /** Use `LightCluster.start`. */
  constructor (workers: Worker[]) {
    this.#workers = workers
  }

  /** Starts the workers and their nodes (all workers at once, each `batch` nodes at a time). */
  static async start (options: LightClusterOptions): Promise<LightCluster> {
    const count = Math.max(1, options.workers ?? Math.ceil(options.nodes / 25))
    const cluster = new LightCluster(Array.from({ length: count }, () => new Worker()))
    try {
      const shares = cluster.#workers.map((_, i) => Math.floor(options.nodes / count) + (i < options.nodes % count ? 1 : 0))
      const started = await Promise.all(cluster.#workers.map(async (worker, i) =>
        await worker.call<string[]>({
          op: 'start',
          count: shares[i],
          relayUrls: options.relayUrls,
          network: options.network ?? {},
          batch: options.batch ?? 5,
          pace: options.startEveryMs == null ? undefined : { firstMs: i * options.startEveryMs, everyMs: count * options.startEveryMs }
        })))
      started.forEach((nodeIDs, i) => {
        nodeIDs.forEach((nodeID, local) => {
          cluster.nodeIDs.push(nodeID)
          cluster.#places.push({ worker: cluster.#workers[i], local })
        })
      })
      return cluster
    } catch (err) {
      await cluster.stop()
      throw err
    }
  }

  get size (): number {
    return this.nodeIDs.length
  }

  /** Every node's state, by index; `candidates` counts the peers each would route a request for `modelID` to. */
  async stats (modelID?: string): Promise<NodeStats[]> {
    const all = await Promise.all(this.#workers.map(async worker => await worker.call<NodeStats[]>({ op: 'stats', modelID })))
    return all.flat()
  }

  async serve (index: number, modelID: string | null): Promise<void> {
    const { worker, local } = this.#places[index]
    await worker.call({ op: 'serve', index: local, modelID })
  }

  /** Node `index` asks the network for `modelID` through its router. */
  async ask (index: number, modelID: string, content: string): Promise<{ text: string, servedBy: string }> {
    const { worker, local } = this.#places[index]
    return await worker.call({ op: 'ask', index: local, modelID, content })
  }

  /** Whether node `index` holds a connection to `nodeID`. */
  async connectedTo (index: number, nodeID: string): Promise<boolean> {
    const { worker, local } = this.#places[index]
    return await worker.call({ op: 'connectedTo', index: local, nodeID })
  }

  /** Bytes written, write calls and CPU time (ms) of all the workers together. */
  async io (): Promise<{ bytes: number, writes: number, cpuMs: number }> {
    const all = await Promise.all(this.#workers.map(async worker => await worker.call<{ bytes: number, writes: number, cpuMs: number }>({ op: 'io' })))
    return all.reduce((sum, one) => ({ bytes: sum.bytes + one.bytes, writes: sum.writes + one.writes, cpuMs: sum.cpuMs + one.cpuMs }), { bytes: 0, writes: 0, cpuMs: 0 })
  }

  /** Stops every node, then the workers (once: a second call does nothing). */
  async stop (): Promise<void> {
    if (this.#stopped) return
    this.#stopped = true
    await Promise.all(this.#workers.map(async (worker) => {
      try {
        await worker.call({ op: 'stop' })
      } finally {
        await worker.exit()
      }
    }))
  }
}
