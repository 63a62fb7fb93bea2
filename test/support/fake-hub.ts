// A local stand-in for the Hugging Face hub (STYLE §11: at the outer edge, a local HTTP server with fixtures), with
// the hub's own shapes: repo info under /api/models, files under /resolve/ that 302 to a CDN for LFS files, and
// fault injection for the downloader's resume, retry and integrity paths.
import { createServer } from 'node:http'
import type { IncomingMessage, Server, ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { createHash } from 'node:crypto'
import { readFile } from 'node:fs/promises'

export interface FakeHubOptions {
  /** When set, hub endpoints answer 401 unless sent `Authorization: Bearer <token>`; the CDN never asks. */
  token?: string | null
  /** Whether /resolve/ answers LFS files with a 302 to the CDN, as the real hub does. Default true. */
  redirectLfs?: boolean
  /** Serves file bytes no faster than this, in slices ten times a second, as a slow link would (a UI test sees progress). */
  bytesPerSecond?: number | null
}

export interface FakeHubRequest {
  /** Which listener saw it: the hub, or the CDN that LFS downloads are redirected to (another origin). */
  server: 'hub' | 'cdn'
  method: string
  path: string
  range: string | null
  authorization: string | null
  status: number
}

export interface HubFile { sha256: string, sizeBytes: number }

export interface FakeHub {
  /** Base URL, as `$HF_ENDPOINT` would be: http://127.0.0.1:PORT */
  url: string
  /** Base URL of the CDN listener: another port, so another origin, like the real hub's LFS CDN. */
  cdnUrl: string
  /** Every request seen by either listener, in arrival order. */
  readonly requests: readonly FakeHubRequest[]
  /**
   * Adds a file from bytes or a path. LFS by default: /resolve/ redirects to the CDN and names its sha256 in
   * X-Linked-Etag; `lfs: false` serves it from the hub with a git blob id as ETag. `chunked` omits Content-Length,
   * like a generated file, so a client learns the size only at the end.
   */
  addFile: (repo: string, filename: string, source: Buffer | string, options?: AddFileOptions) => Promise<HubFile>
  /** The next GET that serves file bytes destroys its socket after `n` body bytes. */
  dropAfterBytes: (n: number) => void
  /** The next GET that serves file bytes sends `n` body bytes, then neither sends more nor closes until the client does. */
  stallAfterBytes: (n: number) => void
  /** The next request of any kind answers `status` (e.g. 503, 429), with Retry-After when given. */
  failNext: (status: number, options?: { retryAfterSeconds?: number }) => void
  /** The next GET that serves file bytes flips its first body byte; headers still name the true sha256. */
  corruptNext: () => void
  /** The next GET that serves file bytes ignores its Range header and answers 200 with the whole file. */
  ignoreRangeNext: () => void
  close: () => Promise<void>
}

export interface AddFileOptions { lfs?: boolean, chunked?: boolean }

interface StoredFile { bytes: Buffer, sha256: string, gitSha1: string, lfs: boolean, chunked: boolean }
type BodyFault =
  | { kind: 'drop', afterBytes: number }
  | { kind: 'stall', afterBytes: number }
  | { kind: 'corrupt' }
  | { kind: 'ignore-range' }
interface StatusFault { status: number, retryAfterSeconds: number | null }

export async function startFakeHub (options: FakeHubOptions = {}): Promise<FakeHub> {
  const { token = null, redirectLfs = true, bytesPerSecond = null } = options
  const repos = new Map<string, Map<string, StoredFile>>()
  const blobs = new Map<string, StoredFile>() // by sha256, as the CDN addresses them
  const requests: FakeHubRequest[] = []
  const bodyFaults: BodyFault[] = []
  const statusFaults: StatusFault[] = []
  let cdnUrl = ''

  const handle = (server: FakeHubRequest['server']) => (req: IncomingMessage, res: ServerResponse): void => {
    const url = new URL(req.url ?? '/', 'http://fake-hub')
    const record: FakeHubRequest = {
      server,
      method: req.method ?? 'GET',
      path: url.pathname,
      range: req.headers.range ?? null,
      authorization: req.headers.authorization ?? null,
      status: 0
    }
    requests.push(record)
    try {
      route(server, url, req, res)
    } catch (err) {
      // A malformed path (bad percent-encoding) is the client's mistake; anything else should fail the test loudly
      if (!(err instanceof URIError)) throw err
      sendJson(res, 400, { error: err.message })
    }
    record.status = res.statusCode // every route writes its head synchronously
  }

  function route (server: FakeHubRequest['server'], url: URL, req: IncomingMessage, res: ServerResponse): void {
    const fault = statusFaults.shift()
    if (fault != null) {
      const headers: Record<string, string> = {}
      if (fault.retryAfterSeconds != null) headers['Retry-After'] = String(fault.retryAfterSeconds)
      sendJson(res, fault.status, { error: `injected ${fault.status}` }, headers)
      return
    }
    if (server === 'cdn') {
      const match = /^\/cdn\/([0-9a-f]{64})$/.exec(url.pathname)
      const file = match == null ? undefined : blobs.get(match[1])
      if (file == null) {
        sendJson(res, 404, { error: 'Blob not found' })
        return
      }
      // The CDN signs its URLs instead of checking Authorization, and knows nothing of X-Linked-*
      serveBytes(req, res, file, { ETag: `"${file.sha256}"` })
      return
    }
    if (token != null && req.headers.authorization !== `Bearer ${token}`) {
      sendJson(res, 401, { error: 'Invalid credentials in Authorization header' })
      return
    }

    const info = /^\/api\/models\/([^/]+\/[^/]+)(?:\/revision\/[^/]+)?$/.exec(url.pathname)
    if (info != null && (req.method === 'GET' || req.method === 'HEAD')) {
      const repo = decodeURIComponent(info[1])
      const files = repos.get(repo)
      if (files == null) {
        sendJson(res, 404, { error: 'Repository not found' }, { 'X-Error-Code': 'RepoNotFound' })
        return
      }
      const withBlobs = url.searchParams.get('blobs') === 'true'
      const siblings = [...files].map(([rfilename, file]) => withBlobs
        ? {
            rfilename,
            blobId: file.gitSha1,
            size: file.bytes.length,
            ...(file.lfs ? { lfs: { sha256: file.sha256, size: file.bytes.length, pointerSize: 134 } } : {})
          }
        : { rfilename })
      sendJson(res, 200, { id: repo, modelId: repo, sha: 'f'.repeat(40), private: token != null, siblings })
      return
    }

    const resolve = /^\/([^/]+\/[^/]+)\/resolve\/([^/]+)\/(.+)$/.exec(url.pathname)
    if (resolve != null && (req.method === 'GET' || req.method === 'HEAD')) {
      const repo = decodeURIComponent(resolve[1])
      const filename = resolve[3].split('/').map(decodeURIComponent).join('/')
      const files = repos.get(repo)
      const file = files?.get(filename)
      if (file == null) {
        const code = files == null ? 'RepoNotFound' : 'EntryNotFound'
        sendJson(res, 404, { error: files == null ? 'Repository not found' : 'Entry not found' }, { 'X-Error-Code': code })
        return
      }
      const linked: Record<string, string> = file.lfs
        ? { 'X-Linked-Etag': `"${file.sha256}"`, 'X-Linked-Size': String(file.bytes.length) }
        : {}
      if (file.lfs && redirectLfs) {
        res.writeHead(302, { Location: `${cdnUrl}/cdn/${file.sha256}`, ETag: `"${file.gitSha1}"`, 'Content-Length': '0', ...linked })
        res.end()
        return
      }
      serveBytes(req, res, file, { ETag: `"${file.lfs ? file.sha256 : file.gitSha1}"`, ...linked })
      return
    }
    sendJson(res, 404, { error: `No route for ${req.method ?? 'GET'} ${url.pathname}` })
  }

  function serveBytes (req: IncomingMessage, res: ServerResponse, file: StoredFile, headers: Record<string, string>): void {
    const size = file.bytes.length
    // HEAD serves no bytes, so it leaves the faults to the GET they were meant for
    const fault = req.method === 'HEAD' ? undefined : bodyFaults.shift()
    const range = fault?.kind === 'ignore-range' ? null : parseRange(req.headers.range, size)
    if (range === 'unsatisfiable') {
      res.writeHead(416, { 'Content-Range': `bytes */${size}`, 'Content-Type': 'text/plain' })
      res.end('Requested Range Not Satisfiable')
      return
    }
    const [start, end] = range ?? [0, size - 1]
    const body = file.bytes.subarray(start, end + 1)
    res.writeHead(range == null ? 200 : 206, {
      ...headers,
      'Accept-Ranges': 'bytes',
      'Content-Type': 'application/octet-stream',
      ...(file.chunked ? {} : { 'Content-Length': String(body.length) }),
      ...(range == null ? {} : { 'Content-Range': `bytes ${start}-${end}/${size}` })
    })
    if (req.method === 'HEAD') {
      res.end()
      return
    }
    if (fault == null || fault.kind === 'ignore-range') {
      if (bytesPerSecond == null) res.end(body)
      else pace(res, body, bytesPerSecond)
    } else if (fault.kind === 'corrupt') {
      const flipped = Buffer.from(body)
      if (flipped.length > 0) flipped[0] ^= 0xff
      res.end(flipped)
    } else {
      const head = body.subarray(0, fault.afterBytes)
      res.write(head, () => {
        // The bytes are handed to the kernel before the socket goes: the client sees them, then a premature close
        if (fault.kind === 'drop') res.socket?.destroy()
      })
    }
  }

  const hub = createServer(handle('hub'))
  const cdn = createServer(handle('cdn'))
  const hubPort = await listen(hub)
  cdnUrl = `http://127.0.0.1:${await listen(cdn)}`

  return {
    url: `http://127.0.0.1:${hubPort}`,
    cdnUrl,
    requests,
    async addFile (repo, filename, source, fileOptions = {}) {
      const bytes = typeof source === 'string' ? await readFile(source) : Buffer.from(source)
      const file: StoredFile = {
        bytes,
        sha256: createHash('sha256').update(bytes).digest('hex'),
        // Git's blob id, which the real hub sends as the ETag of files stored in git rather than LFS
        gitSha1: createHash('sha1').update(`blob ${bytes.length}\0`).update(bytes).digest('hex'),
        lfs: fileOptions.lfs ?? true,
        chunked: fileOptions.chunked ?? false
      }
      let files = repos.get(repo)
      if (files == null) repos.set(repo, files = new Map())
      files.set(filename, file)
      blobs.set(file.sha256, file)
      return { sha256: file.sha256, sizeBytes: bytes.length }
    },
    dropAfterBytes (n) { bodyFaults.push({ kind: 'drop', afterBytes: n }) },
    stallAfterBytes (n) { bodyFaults.push({ kind: 'stall', afterBytes: n }) },
    failNext (status, failOptions = {}) { statusFaults.push({ status, retryAfterSeconds: failOptions.retryAfterSeconds ?? null }) },
    corruptNext () { bodyFaults.push({ kind: 'corrupt' }) },
    ignoreRangeNext () { bodyFaults.push({ kind: 'ignore-range' }) },
    async close () {
      await Promise.all([stop(hub), stop(cdn)])
    }
  }
}

/** Writes `body` a tenth of `bytesPerSecond` at a time, every 100 ms, until done or the client hangs up. */
function pace (res: ServerResponse, body: Buffer, bytesPerSecond: number): void {
  const slice = Math.max(1, Math.floor(bytesPerSecond / 10))
  let sent = 0
  const timer = setInterval(() => {
    if (res.destroyed) {
      clearInterval(timer)
      return
    }
    const next = body.subarray(sent, sent + slice)
    sent += next.length
    if (sent >= body.length) {
      clearInterval(timer)
      res.end(next)
    } else {
      res.write(next)
    }
  }, 100)
  res.once('close', () => { clearInterval(timer) })
}

/** `bytes=N-` or `bytes=N-M`, as the hub and its CDN honour them; null means the whole file. */
function parseRange (header: string | undefined, size: number): [number, number] | null | 'unsatisfiable' {
  if (header == null) return null
  const match = /^bytes=(\d+)-(\d*)$/.exec(header.trim())
  if (match == null) return null // like most servers, ignore a range form we do not serve and send everything
  const start = Number(match[1])
  const end = match[2] === '' ? size - 1 : Math.min(Number(match[2]), size - 1)
  if (start >= size || end < start) return 'unsatisfiable'
  return [start, end]
}

function sendJson (res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  const json = JSON.stringify(body)
  res.writeHead(status, { ...headers, 'Content-Type': 'application/json', 'Content-Length': String(Buffer.byteLength(json)) })
  res.end(json)
}

async function listen (server: Server): Promise<number> {
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject)
    server.listen(0, '127.0.0.1', () => {
      server.off('error', reject)
      resolve()
    })
  })
  return (server.address() as AddressInfo).port
}

async function stop (server: Server): Promise<void> {
  // Stalled answers and idle keep-alive sockets would otherwise hold close() open
  server.closeAllConnections()
  await new Promise<void>((resolve, reject) => server.close((err) => (err == null ? resolve() : reject(err))))
}
