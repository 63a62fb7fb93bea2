// The node's Prometheus metrics, on prom-client: counters and histograms that domains update as things happen, gauges
// read on scrape (so nothing has to keep them up to date), and the process's own metrics. Each domain registers its
// own series; GET /metrics renders them all. The label names of a series are fixed at registration.
import { Counter as PromCounter, Gauge, Histogram as PromHistogram, Registry, collectDefaultMetrics } from 'prom-client'

type Labels<L extends string> = Partial<Record<L, string>>

/** A count that only goes up, per label set. */
export interface Counter<L extends string = never> {
  inc (labels?: Labels<L>, by?: number): void
}

/** Observations counted into fixed buckets, with their sum, per label set. */
export interface Histogram<L extends string = never> {
  observe (value: number, labels?: Labels<L>): void
}

/** What a gauge reads on scrape: one value, or one per label set (a label set left out has no series). */
export type GaugeReading<L extends string> = number | Iterable<{ labels: Labels<L>, value: number }>

/**
 * Process metrics (CPU, memory, heap, event-loop lag, GC, handles) describe the process, not a node, and their
 * collectors are never released (an event-loop delay monitor, a GC observer): one set per process, made when the
 * first registry is, and shown by every node's registry beside its own series.
 */
let processMetrics: Registry | null = null

function processRegistry (): Registry {
  if (processMetrics == null) {
    processMetrics = new Registry()
    collectDefaultMetrics({ register: processMetrics })
  }
  return processMetrics
}

/** One node's series. Several nodes may run in one process: each has its own registry, never prom-client's global one. */
export class MetricsRegistry {
  readonly #registry = new Registry()
  readonly #process = processRegistry()

  counter<L extends string = never> (name: string, help: string, labelNames: readonly L[] = []): Counter<L> {
    const counter = new PromCounter<L>({ name, help, labelNames, registers: [this.#registry] })
    return { inc: (labels = {}, by = 1) => { counter.inc(labels, by) } }
  }

  histogram<L extends string = never> (name: string, help: string, buckets: readonly number[], labelNames: readonly L[] = []): Histogram<L> {
    const histogram = new PromHistogram<L>({ name, help, buckets: [...buckets], labelNames, registers: [this.#registry] })
    return { observe: (value, labels = {}) => { histogram.observe(labels, value) } }
  }

  /** A gauge whose value is read when scraped; the series of a label set not read this time are gone. */
  gauge<L extends string = never> (name: string, help: string, labelNames: readonly L[], read: () => GaugeReading<L>): void {
    new Gauge<L>({ // kept by the registry it registers in
      name,
      help,
      labelNames,
      registers: [this.#registry],
      collect () {
        this.reset()
        const reading = read()
        if (typeof reading === 'number') this.set(reading)
        else for (const { labels, value } of reading) this.set(labels, value)
      }
    })
  }

  /** The `Content-Type` of `render`'s text: the Prometheus text format 0.0.4. */
  get contentType (): string {
    return this.#registry.contentType
  }

  /** Every series of this node, then the process's, in the Prometheus text format. */
  async render (): Promise<string> {
    return await Registry.merge([this.#registry, this.#process]).metrics()
  }
}
