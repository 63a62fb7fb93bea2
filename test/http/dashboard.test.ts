// The dashboard's files as the node serves them (no browser: that is test/dashboard/): same origin, public even
// with network access on, locked down by CSP, cached by content hash, gzipped, and small.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { existsSync, readdirSync } from 'node:fs'
import { join } from 'node:path'
import { gzipSync } from 'node:zlib'
import { DASHBOARD_DIR } from '../../src/config.ts'
import { bareHttpApp } from '../support/bare-app.ts'
import { startTestNode, tempDir } from '../support/node.ts'

/** The budget for the JavaScript sent to the browser, gzipped. */
const JS_BUDGET_BYTES = 200 * 1024

function assets (): string[] {
  assert.ok(existsSync(join(DASHBOARD_DIR, 'index.html')), `the dashboard is not built in ${DASHBOARD_DIR}: run npm install (or npm run build:dashboard)`)
  return readdirSync(join(DASHBOARD_DIR, 'assets'))
}

test('/ serves the dashboard with a strict CSP, no CORS, and without a key even when network access is on', async (t) => {
  assets()
  const { api } = await startTestNode(t)
  assert.equal((await api.patch('/v1/app/settings', { allow_network_access: true })).status, 200)
  const res = await fetch(`${api.url}/`)
  assert.equal(res.status, 200)
  assert.match(res.headers.get('content-type') ?? '', /^text\/html/)
  const csp = res.headers.get('content-security-policy') ?? ''
  for (const directive of ["default-src 'self'", "script-src 'self'", "connect-src 'self'", "frame-ancestors 'none'", "base-uri 'none'"]) {
    assert.ok(csp.includes(directive), `${directive} in ${csp}`)
  }
  assert.ok(!csp.includes('unsafe-inline') && !csp.includes('unsafe-eval'))
  assert.equal(res.headers.get('x-content-type-options'), 'nosniff')
  assert.equal(res.headers.get('x-frame-options'), 'DENY')
  assert.equal(res.headers.get('referrer-policy'), 'no-referrer')
  assert.equal(res.headers.get('cache-control'), 'no-cache')
  assert.equal(res.headers.get('access-control-allow-origin'), null)
  const html = await res.text()
  assert.match(html, /<div id="app">/)
  assert.ok(!/<script>(?!<\/script>)/.test(html), 'no inline script (the CSP would refuse it)')
  // The API itself still wants a key.
  assert.equal((await api.get('/v1/app')).status, 401)
  // A foreign page may not load it into its own origin's requests either.
  assert.equal((await fetch(`${api.url}/`, { headers: { origin: 'https://evil.example' } })).status, 403)
})

test('assets: immutable by content hash, gzipped when asked, 304 when unchanged; nothing outside the build answers', async (t) => {
  const files = assets()
  const { api } = await startTestNode(t)
  const script = files.find((f) => f.endsWith('.js'))
  assert.ok(script != null)
  const res = await fetch(`${api.url}/assets/${script}`, { headers: { 'accept-encoding': 'gzip' } })
  assert.equal(res.status, 200)
  assert.match(res.headers.get('content-type') ?? '', /^text\/javascript/)
  assert.equal(res.headers.get('content-encoding'), 'gzip')
  assert.match(res.headers.get('cache-control') ?? '', /immutable/)
  const etag = res.headers.get('etag')
  assert.ok(etag != null)
  assert.ok((await res.text()).length > 0)
  const again = await fetch(`${api.url}/assets/${script}`, { headers: { 'if-none-match': etag } })
  assert.equal(again.status, 304)
  for (const path of ['/assets/nope.js', '/assets/../package.json', '/%2e%2e/package.json', '/src/main.tsx', '/index.html/']) {
    const res = await fetch(`${api.url}${path}`)
    assert.equal(res.status, 404, path)
    assert.equal((await res.json()).error.type, 'not_found', path)
  }
})

test('the JavaScript sent to the browser is under 200 KB gzipped', async (t) => {
  const files = assets().filter((f) => f.endsWith('.js'))
  const { api } = await startTestNode(t)
  let total = 0
  for (const file of files) {
    const body = Buffer.from(await (await fetch(`${api.url}/assets/${file}`)).arrayBuffer())
    total += gzipSync(body, { level: 9 }).length
  }
  t.diagnostic(`dashboard JavaScript: ${files.length} files, ${(total / 1024).toFixed(1)} KB gzipped`)
  assert.ok(total > 0)
  assert.ok(total < JS_BUDGET_BYTES, `${total} bytes gzipped`)
})

test('a node whose dashboard was never built says how to build it, and its API works', async (t) => {
  const app = await bareHttpApp(t, { dashboardDir: join(await tempDir(t), 'no-build-here') })
  const res = await app.inject({ method: 'GET', url: '/', headers: { host: '127.0.0.1' } })
  assert.equal(res.statusCode, 503)
  assert.match(res.body, /npm run build:dashboard/)
  assert.equal((await app.inject({ method: 'GET', url: '/health', headers: { host: '127.0.0.1' } })).statusCode, 200)
})
