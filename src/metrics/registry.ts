// A small Prometheus text-format registry: counters, gauges read on scrape, and histograms. Each domain registers its
// own series; GET /metrics renders them all. Labels are fixed per series at registration.

type Labels = Record<string, string>

interface Series {
  name: string
  help: string
  type: 'counter' | 'gauge' | 'histogram'
  render: () => string[]
}

export class Counter {
  readonly #values = new Map<string, { labels: Labels, value: number }>()
  inc (labels: Labels = {}, by = 1): void {
    const key = labelKey(labels)
    const entry = this.#values.get(key)
    if (entry == null) this.#values.set(key, { labels, value: by })
    else entry.value += by
  }

  lines (name: string): string[] {
    return [...this.#values.values()].map(({ labels, value }) => `${name}${formatLabels(labels)} ${value}`)
  }
}

export class Histogram {
  readonly #buckets: readonly number[]
  readonly #values = new Map<string, { labels: Labels, counts: number[], sum: number, count: number }>()
  constructor (buckets: readonly number[]) {
    this.#buckets = buckets
  }

  observe (value: number, labels: Labels = {}): void {
    const key = labelKey(labels)
    let entry = this.#values.get(key)
    if (entry == null) {
      entry = { labels, counts: this.#buckets.map(() => 0), sum: 0, count: 0 }
      this.#values.set(key, entry)
    }
    for (let i = 0; i < this.#buckets.length; i++) if (value <= this.#buckets[i]) entry.counts[i]++
    entry.sum += value
    entry.count++
  }

  lines (name: string): string[] {
    const out: string[] = []
    for (const { labels, counts, sum, count } of this.#values.values()) {
      this.#buckets.forEach((bound, i) => out.push(`${name}_bucket${formatLabels({ ...labels, le: String(bound) })} ${counts[i]}`))
      out.push(`${name}_bucket${formatLabels({ ...labels, le: '+Inf' })} ${count}`)
      out.push(`${name}_sum${formatLabels(labels)} ${sum}`)
      out.push(`${name}_count${formatLabels(labels)} ${count}`)
    }
    return out
  }
}

export class MetricsRegistry {
  readonly #series: Series[] = []

  counter (name: string, help: string): Counter {
    const counter = new Counter()
    this.#series.push({ name, help, type: 'counter', render: () => counter.lines(name) })
    return counter
  }

  histogram (name: string, help: string, buckets: readonly number[]): Histogram {
    const histogram = new Histogram(buckets)
    this.#series.push({ name, help, type: 'histogram', render: () => histogram.lines(name) })
    return histogram
  }

  /** A gauge whose value is read when scraped, so nothing has to keep it up to date. */
  gauge (name: string, help: string, read: () => number | Array<{ labels: Labels, value: number }>): void {
    this.#series.push({
      name,
      help,
      type: 'gauge',
      render: () => {
        const value = read()
        return typeof value === 'number'
          ? [`${name} ${value}`]
          : value.map((entry) => `${name}${formatLabels(entry.labels)} ${entry.value}`)
      }
    })
  }

  render (): string {
    const out: string[] = []
    for (const series of this.#series) {
      out.push(`# HELP ${series.name} ${series.help}`, `# TYPE ${series.name} ${series.type}`, ...series.render())
    }
    return out.join('\n') + '\n'
  }
}

function labelKey (labels: Labels): string {
  return Object.entries(labels).sort(([a], [b]) => a.localeCompare(b)).map(([k, v]) => `${k}=${v}`).join(',')
}

function formatLabels (labels: Labels): string {
  const entries = Object.entries(labels)
  if (entries.length === 0) return ''
  return '{' + entries.map(([k, v]) => `${k}="${v.replaceAll('\\', '\\\\').replaceAll('"', '\\"').replaceAll('\n', '\\n')}"`).join(',') + '}'
}
