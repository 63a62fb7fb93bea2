export { MetricsRegistry, Counter, Histogram } from './registry.ts'
