// The dashboard: the files Vite built into dashboard/dist, served by the node itself at `/`, so the page
// and the API share one origin (no CORS) and the Host and Origin guards cover both.
import { createHash } from 'node:crypto'
import { readdirSync, readFileSync } from 'node:fs'
import { extname, join, relative, sep } from 'node:path'
import { gzipSync } from 'node:zlib'
import type { FastifyReply, FastifyRequest } from 'fastify'
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod'

export interface DashboardRoutesOptions {
  /** The build output (index.html and assets/); when it holds no index.html, `/` says how to build it. */
  dir: string
}

interface StaticFile {
  body: Buffer
  gzip: Buffer | null
  type: string
  etag: string
  /** Vite names assets by content hash: those never change under their name. */
  immutable: boolean
}

const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.ico': 'image/x-icon',
  '.json': 'application/json',
  '.woff2': 'font/woff2'
}

/**
 * Only our own scripts and styles run, the page talks only to this node, and no other page may frame it. Style
 * attributes are set through the CSSOM (`element.style`), which CSP does not restrict, so no 'unsafe-inline'.
 */
export const DASHBOARD_CSP = [
  "default-src 'self'", "script-src 'self'", "style-src 'self'", "img-src 'self' data:", "connect-src 'self'",
  "font-src 'self'", "object-src 'none'", "base-uri 'none'", "form-action 'self'", "frame-ancestors 'none'"
].join('; ')

const NOT_BUILT = '<!doctype html><html lang="en"><head><meta charset="utf-8"><title>meshnode</title></head><body>' +
  '<h1>The dashboard is not built</h1><p>Run <code>npm install</code> (or <code>npm run build:dashboard</code>) in ' +
  'the meshnode folder, then reload. The API is unaffected.</p></body></html>'

/**
 * Reads the build once at start (a few files, well under a megabyte) and keeps each in memory with its gzip, so a
 * request costs no disk read. Every file is its own route: no wildcard can shadow an API path or reach outside.
 */
export const dashboardRoutes: FastifyPluginAsyncZod<DashboardRoutesOptions> = async (app, { dir }) => {
  const files = loadBuild(dir)
  const routeOptions = { config: { public: true }, schema: { hide: true } } as const

  const index = files.get('index.html')
  if (index == null) {
    app.get('/', routeOptions, async (_request, reply) => {
      return await reply.code(503).headers(securityHeaders()).type('text/html; charset=utf-8').send(NOT_BUILT)
    })
    return
  }
  app.get('/', routeOptions, async (request, reply) => await send(request, reply, index))
  for (const [path, file] of files) {
    if (path === 'index.html') continue
    app.get(`/${path}`, routeOptions, async (request, reply) => await send(request, reply, file))
  }
}

function loadBuild (dir: string): Map<string, StaticFile> {
  const files = new Map<string, StaticFile>()
  let entries: string[]
  try {
    entries = readdirSync(dir, { recursive: true, encoding: 'utf8' })
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return files // not built: `/` says so
    throw err
  }
  for (const entry of entries) {
    const type = TYPES[extname(entry)]
    if (type == null) continue // source maps and anything unexpected stay on disk
    const path = relative(dir, join(dir, entry)).split(sep).join('/')
    if (!/^[A-Za-z0-9._/-]+$/.test(path)) continue
    const body = readFileSync(join(dir, entry))
    const compressible = !type.startsWith('image/png') && !type.startsWith('font/')
    files.set(path, {
      body,
      gzip: compressible && body.length > 512 ? gzipSync(body, { level: 9 }) : null,
      type,
      etag: `"${createHash('sha256').update(body).digest('base64url').slice(0, 22)}"`,
      immutable: path.startsWith('assets/')
    })
  }
  return files
}

async function send (request: FastifyRequest, reply: FastifyReply, file: StaticFile): Promise<FastifyReply> {
  void reply.headers(securityHeaders())
    .header('content-type', file.type)
    .header('etag', file.etag)
    .header('vary', 'Accept-Encoding')
    // index.html names the current assets, so it is checked every time; an asset's name changes with its content
    .header('cache-control', file.immutable ? 'public, max-age=31536000, immutable' : 'no-cache')
  if (request.headers['if-none-match'] === file.etag) return await reply.code(304).send()
  const gzip = file.gzip != null && /\bgzip\b/.test(String(request.headers['accept-encoding'] ?? ''))
  if (gzip) void reply.header('content-encoding', 'gzip')
  return await reply.send(gzip ? file.gzip : file.body)
}

function securityHeaders (): Record<string, string> {
  return {
    'content-security-policy': DASHBOARD_CSP,
    'x-content-type-options': 'nosniff',
    'x-frame-options': 'DENY',
    'referrer-policy': 'no-referrer',
    'cross-origin-opener-policy': 'same-origin'
  }
}
