// A closed-loop HTTP load generator: `connections` keep-alive clients each send the next request as soon as the
// previous answer is read, for `seconds`. Used by the benchmarks to compare our server with a bare node:http one.
import { readFileSync } from 'node:fs'
import { Agent, request } from 'node:http'

export interface LoadResult {
  requests: number
  errors: number
  seconds: number
  requestsPerSecond: number
  p50Ms: number
  p99Ms: number
}

export async function runLoad (url: string, options: { connections: number, seconds: number }): Promise<LoadResult> {
  const target = new URL(url)
  const agent = new Agent({ keepAlive: true, maxSockets: options.connections })
  const latencies: number[] = []
  let errors = 0
  const end = Date.now() + options.seconds * 1000
  const one = async (): Promise<void> => await new Promise((resolve) => {
    const started = performance.now()
    const req = request({ hostname: target.hostname, port: target.port, path: target.pathname, agent }, (res) => {
      res.resume()
      res.on('end', () => {
        if (res.statusCode === 200) latencies.push(performance.now() - started)
        else errors++
        resolve()
      })
    })
    req.on('error', () => { errors++; resolve() })
    req.end()
  })
  const started = performance.now()
  await Promise.all(Array.from({ length: options.connections }, async () => {
    while (Date.now() < end) await one()
  }))
  const seconds = (performance.now() - started) / 1000
  agent.destroy()
  latencies.sort((a, b) => a - b)
  const at = (q: number): number => latencies.length === 0 ? 0 : Math.round(latencies[Math.min(latencies.length - 1, Math.floor(q * latencies.length))] * 100) / 100
  return { requests: latencies.length, errors, seconds, requestsPerSecond: Math.round(latencies.length / seconds), p50Ms: at(0.5), p99Ms: at(0.99) }
}

/** Resident set size of a process in MB, from /proc (Linux). */
export function rssMB (pid: number): number | null {
  if (process.platform !== 'linux') return null
  const status = readFileSync(`/proc/${pid}/status`, 'utf8')
  const kb = Number(/VmRSS:\s+(\d+)/.exec(status)?.[1])
  return Math.round(kb / 1024 * 10) / 10
}
