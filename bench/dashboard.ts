// bench:dashboard — how long the overview takes to render in headless Chromium, against a page load of the node's
// smallest answer (GET /health, the floor of a round trip through the same browser and server) in the same run.
// Method and results in bench/README.md. Needs a system Chromium (apt-get install -y chromium).
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { defaultConfig } from '../src/config.ts'
import { startNode } from '../src/node.ts'
import { findChromium, launchChromium } from '../test/support/browser.ts'

const RUNS = Number(process.env.BENCH_RUNS ?? 15)

if (findChromium() == null) {
  process.stderr.write('bench:dashboard needs a Chromium: apt-get install -y chromium (or set $MESHNODE_CHROMIUM)\n')
  process.exit(1)
}

function summary (values: number[]): string {
  const sorted = [...values].sort((a, b) => a - b)
  const at = (q: number): number => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]
  return `median ${at(0.5).toFixed(0)} ms, p90 ${at(0.9).toFixed(0)} ms, min ${sorted[0].toFixed(0)} ms, max ${sorted[sorted.length - 1].toFixed(0)} ms`
}

const dataDir = await mkdtemp(join(tmpdir(), 'meshnode-bench-'))
const node = await startNode(defaultConfig({ port: 0, dataDir, logLevel: 'silent' }))
const browser = await launchChromium()
try {
  const cold: number[] = []
  const warm: number[] = []
  const floor: number[] = []
  for (let run = 0; run < RUNS + 1; run++) {
    // A fresh context each run: no cache, no cookies, as a first visit is
    const context = await browser.newContext()
    const page = await context.newPage()
    let start = performance.now()
    await page.goto(`${node.url}/health`)
    const health = performance.now() - start

    start = performance.now()
    await page.goto(`${node.url}/#/overview`)
    await page.getByTestId('overview-node-id').waitFor()
    const first = performance.now() - start

    start = performance.now()
    await page.reload()
    await page.getByTestId('overview-node-id').waitFor()
    const again = performance.now() - start
    await context.close()
    if (run === 0) continue // warm-up: the browser's first page and the node's first requests
    floor.push(health)
    cold.push(first)
    warm.push(again)
  }
  process.stdout.write(`bench:dashboard  ${RUNS} runs, fresh browser context each, node with default settings, no model\n`)
  process.stdout.write(`  GET /health page load (floor):       ${summary(floor)}\n`)
  process.stdout.write(`  overview rendered, first visit:      ${summary(cold)}\n`)
  process.stdout.write(`  overview rendered, reload (cached):  ${summary(warm)}\n`)
} finally {
  await browser.close()
  await node.close()
  await rm(dataDir, { recursive: true, force: true })
}
