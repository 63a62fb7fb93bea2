import { MAX_ADVERTISED_DEMAND } from '../network/index.ts'

/** Demand counted an hour ago weighs a quarter of demand counted now. */
export const DEMAND_HALF_LIFE_MS = 30 * 60_000
/** Models kept in the advertised list, most demanded first: the capability record's limit. */
export const MAX_DEMAND_ENTRIES = MAX_ADVERTISED_DEMAND

export interface DemandEntry {
  modelID: string
  requests: number
}

/**
 * Requests this node could not serve, per model, its own users' and its peers' alike: the router
 * counts a model no peer serves, the serving policy a model a peer asked for that is not loaded here. The count
 * decays with a half-life of DEMAND_HALF_LIFE_MS, so demand describes the last hour or so, not all time. Advertised
 * to peers in the capability record, and weighed by demand-driven models.
 */
export class DemandTracker {
  /** Decaying count per model: { score, at (unix ms of the score) }. */
  readonly #demand = new Map<string, { score: number, at: number }>()
  readonly #listeners = new Set<() => void>()

  /** Counts one request for `modelID`. */
  record (modelID: string, now: number = Date.now()): void {
    const current = this.#demand.get(modelID)
    this.#demand.set(modelID, { score: decayed(current, now) + 1, at: now })
    if (this.#demand.size > MAX_DEMAND_ENTRIES * 4) {
      // Keep the most demanded: a flood of made-up model ids must not grow this without bound.
      const kept = this.list(now)
      this.#demand.clear()
      for (const { modelID: id, requests } of kept) this.#demand.set(id, { score: requests, at: now })
    }
    for (const listener of this.#listeners) listener()
  }

  /**
   * Calls `listener` after each request counted; returns the function that stops it. The decay is no event: `list`
   * shows it whenever it is read. Listeners must not throw.
   */
  onRecord (listener: () => void): () => void {
    this.#listeners.add(listener)
    return () => { this.#listeners.delete(listener) }
  }

  /** The demand now, most demanded first, at most MAX_DEMAND_ENTRIES; what has decayed below half a request is gone. */
  list (now: number = Date.now()): DemandEntry[] {
    const entries: DemandEntry[] = []
    for (const [modelID, entry] of this.#demand) {
      const score = decayed(entry, now)
      if (score < 0.5) {
        this.#demand.delete(modelID)
        continue
      }
      entries.push({ modelID, requests: Math.max(1, Math.round(score)) })
    }
    return entries.sort((a, b) => b.requests - a.requests).slice(0, MAX_DEMAND_ENTRIES)
  }
}

function decayed (entry: { score: number, at: number } | undefined, now: number): number {
  if (entry == null) return 0
  return entry.score * 0.5 ** (Math.max(0, now - entry.at) / DEMAND_HALF_LIFE_MS)
}
