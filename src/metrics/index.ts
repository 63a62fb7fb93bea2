export { MetricsRegistry, type Counter, type Histogram, type GaugeReading } from './registry.ts'
