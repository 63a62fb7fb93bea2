import { totalmem } from 'node:os'
import { setTimeout as delay } from 'node:timers/promises'
import type { Logger } from 'pino'
import type { PeerInfo } from '../network/index.ts'
import type { DemandEntry } from './demand.ts'

/** Most requests one peer's advertised demand counts for, per model. */
export const PEER_DEMAND_CAP = 20

/** What this part uses of the demand tracker: this node's own unserved requests (its users' and its peers' asks). */
export interface OwnDemand {
  list (): DemandEntry[]
}

/** What this part uses of the peer network: peers, each advertising its own demand and the model it serves. */
export interface DemandPeers {
  peers (): PeerInfo[]
}

/** What this part uses of the model store (`ModelStore` has it). */
export interface ManagedModels {
  list (): Array<{ modelID: string, status: string, sizeBytes: number | null }>
  /** Starts a download; evicts least-recently-used models that are not loaded when the budget needs room. */
  startDownload (modelID: string): Promise<{ status: string, modelID: string }>
  load (modelID: string): Promise<unknown>
  loadedModel (): { modelID: string, status: string } | null
}

export interface DemandDrivenModelsDeps {
  demand: OwnDemand
  network: DemandPeers
  models: ManagedModels
  engine: { stats (): { busySlots: number, queued: number } }
  settings: { get (): { auto_manage_models: boolean } }
  sameModel: (a: string, b: string) => boolean
  log: Logger
}

export interface DemandDrivenModelsOptions {
  /** How often demand is weighed. @default 15_000 */
  intervalMs?: number
  /** Requests (own and peers' together, decayed) a model needs before this node fetches it. @default 3 */
  minRequests?: number
  /** How long the engine must have been seen idle before the loaded model is swapped. @default 30_000 */
  idleMs?: number
  /** How long a model whose download or load failed is left alone. @default 600_000 */
  retryAfterMs?: number
  /** Largest model (bytes) this node will load: its weights must fit in memory. @default 80 % of the RAM */
  maxModelBytes?: number
}

export interface DemandDecision {
  modelID: string
  requests: number
  action: 'download' | 'load'
}

/**
 * Demand-driven models (`auto_manage_models`): while the setting is on, weighs the requests nobody
 * could serve (this node's and those its peers advertise), downloads the most demanded model that no peer serves
 * yet and that fits the storage budget (the model store evicts least-recently-used unloaded models for it) and the
 * memory, and swaps the engine to it once the engine has been idle for a while. Downloads and loads show in the
 * model events and the snapshot like any other.
 */
export class DemandDrivenModels {
  readonly #deps: DemandDrivenModelsDeps
  readonly #intervalMs: number
  readonly #minRequests: number
  readonly #idleMs: number
  readonly #retryAfterMs: number
  readonly #maxModelBytes: number
  readonly #failedUntil = new Map<string, number>()
  #lastBusy = Date.now()
  #last: DemandDecision | null = null
  #shutdown: AbortController | null = null
  #running: Promise<void> | null = null

  constructor (deps: DemandDrivenModelsDeps, options: DemandDrivenModelsOptions = {}) {
    this.#deps = deps
    this.#intervalMs = options.intervalMs ?? 15_000
    this.#minRequests = options.minRequests ?? 3
    this.#idleMs = options.idleMs ?? 30_000
    this.#retryAfterMs = options.retryAfterMs ?? 600_000
    this.#maxModelBytes = options.maxModelBytes ?? Math.floor(totalmem() * 0.8)
  }

  /** The last download or swap it started, if any. */
  get lastDecision (): DemandDecision | null {
    return this.#last
  }

  start (): void {
    if (this.#running != null) return
    const shutdown = new AbortController()
    this.#shutdown = shutdown
    this.#running = this.#loop(shutdown.signal)
  }

  async stop (): Promise<void> {
    this.#shutdown?.abort()
    await this.#running
    this.#running = null
  }

  /** Demand per model, own and advertised by peers, most demanded first; models a peer or this node serves left out. */
  unmetDemand (): Array<{ modelID: string, requests: number }> {
    const { sameModel } = this.#deps
    const totals: Array<{ modelID: string, requests: number }> = []
    const add = (modelID: string, requests: number): void => {
      const entry = totals.find(e => sameModel(e.modelID, modelID))
      if (entry == null) totals.push({ modelID, requests })
      else entry.requests += requests
    }
    const peers = this.#deps.network.peers()
    for (const entry of this.#deps.demand.list()) add(entry.modelID, entry.requests)
    // One peer's word weighs at most PEER_DEMAND_CAP requests per model: no one peer outweighs many (one that keeps
    // asking for a model may still bring it here, which is what auto_manage_models is for).
    for (const peer of peers) for (const entry of peer.record.demand) add(entry.modelID, Math.min(entry.requests, PEER_DEMAND_CAP))
    const served = [this.#deps.models.loadedModel()?.modelID, ...peers.flatMap(p => p.record.models.allLoaded ?? [p.record.models.loaded])].filter((id): id is string => id != null)
    return totals.filter(e => !served.some(id => sameModel(id, e.modelID))).sort((a, b) => b.requests - a.requests)
  }

  /** One round: at most one download started or one swap done. Exposed for tests; the loop calls it. */
  async step (now: number = Date.now()): Promise<DemandDecision | null> {
    const { models, engine, log } = this.#deps
    const stats = engine.stats()
    if (stats.busySlots > 0 || stats.queued > 0) this.#lastBusy = now
    if (!this.#deps.settings.get().auto_manage_models) return null
    const listed = models.list()
    if (listed.some(m => m.status === 'downloading')) return null   // one thing at a time; it shows in the snapshot
    for (const wanted of this.unmetDemand()) {
      if (wanted.requests < this.#minRequests) break
      if ((this.#failedUntil.get(wanted.modelID) ?? 0) > now) continue
      const record = listed.find(m => this.#deps.sameModel(m.modelID, wanted.modelID))
      if (record?.sizeBytes != null && record.sizeBytes > this.#maxModelBytes) continue
      try {
        if (record?.status === 'downloaded') {
          // Swap when idle: a model in use stays until its users have gone quiet (nothing to wait for if none is loaded).
          const idle = stats.busySlots === 0 && stats.queued === 0 && (models.loadedModel() == null || now - this.#lastBusy >= this.#idleMs)
          if (!idle) return null
          log.info({ modelID: record.modelID, requests: wanted.requests }, 'demand-driven models: loading the most demanded model')
          this.#last = { modelID: record.modelID, requests: wanted.requests, action: 'load' }
          await models.load(record.modelID)
          return this.#last
        }
        log.info({ modelID: wanted.modelID, requests: wanted.requests }, 'demand-driven models: downloading the most demanded model')
        const started = await models.startDownload(wanted.modelID)
        this.#last = { modelID: started.modelID, requests: wanted.requests, action: 'download' }
        return this.#last
      } catch (err) {
        // Unknown to the hub, over the storage budget, not loadable: leave this model alone for a while, try the next.
        log.warn({ err, modelID: wanted.modelID }, 'demand-driven models: cannot fetch or load this model')
        // Failures past their time go as new ones come: a stream of made-up model ids must not grow this for good
        for (const [modelID, until] of this.#failedUntil) if (until <= now) this.#failedUntil.delete(modelID)
        this.#failedUntil.set(wanted.modelID, now + this.#retryAfterMs)
      }
    }
    return null
  }

  async #loop (signal: AbortSignal): Promise<void> {
    while (!signal.aborted) {
      try {
        await delay(this.#intervalMs, undefined, { signal, ref: false })
      } catch (err) {
        if (signal.aborted) return   // stop() ends the wait
        throw err
      }
      try {
        await this.step()
      } catch (err) {
        this.#deps.log.error({ err }, 'demand-driven models: step failed')
      }
    }
  }
}
