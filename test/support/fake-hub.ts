// A local stand-in for the Hugging Face hub (tests fake only the outer edge, with a local HTTP server and fixtures), with
// the hub's own shapes: repo info under /api/models, files under /resolve/<revision>/ that 302 to a CDN for LFS files,
// and fault injection for the downloader's resume, retry and integrity paths. Like the real hub: every
// addFile is a new commit, named by X-Repo-Commit and fetchable by its sha; a renamed repo answers a relative 307 to
// its new name without X-Linked-*; refusals carry X-Error-Code, and a missing repo is a 401 to an anonymous client;
// a rate limit is a 429 with `RateLimit: "api";r=0;t=N` and no Retry-After.
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
  /**
   * The next request (of the kind `on` names: any by default) answers `status` (e.g. 503, 429), with Retry-After when
   * given, or the hub's `RateLimit` header with `rateLimitResetSeconds` (and no Retry-After, as the real hub).
   */
  failNext: (status: number, options?: { retryAfterSeconds?: number, rateLimitResetSeconds?: number, on?: FaultTarget }) => void
  /** The repo now lives at `to`: requests for `from` answer a relative 307 to the same path under `to`. */
  renameRepo: (from: string, to: string) => void
  /** The commit `main` of a repo is now (after its last addFile). */
  commitOf: (repo: string) => string
  /** The next GET that serves file bytes flips its first body byte; headers still name the true sha256. */
  corruptNext: () => void
  /** The next GET that serves file bytes ignores its Range header and answers 200 with the whole file. */
  ignoreRangeNext: () => void
  close: () => Promise<void>
}

export interface AddFileOptions { lfs?: boolean, chunked?: boolean }

/** Which requests a status fault is for: the repo API, /resolve/ (hub file requests), the CDN, or whichever comes. */
export type FaultTarget = 'any' | 'api' | 'resolve' | 'cdn'

interface StoredFile { bytes: Buffer, sha256: string, gitSha1: string, lfs: boolean, chunked: boolean }
type BodyFault =
  | { kind: 'drop', afterBytes: number }
  | { kind: 'stall', afterBytes: number }
  | { kind: 'corrupt' }
  | { kind: 'ignore-range' }
interface StatusFault { status: number, retryAfterSeconds: number | null, rateLimitResetSeconds: number | null, on: FaultTarget }
/** A repo's history: each addFile makes a commit, the last one is `main`. */
interface Commit { sha: string, files: Map<string, StoredFile> }

export async function startFakeHub (options: FakeHubOptions = {}): Promise<FakeHub> {
  const { token = null, redirectLfs = true, bytesPerSecond = null } = options
  const repos = new Map<string, Commit[]>()
  const renamed = new Map<string, string>()
  const latest = (repo: string): Map<string, StoredFile> | undefined => repos.get(repo)?.at(-1)?.files
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
    const kind: FaultTarget = server === 'cdn' ? 'cdn' : url.pathname.startsWith('/api/') ? 'api' : 'resolve'
    const at = statusFaults.findIndex((f) => f.on === 'any' || f.on === kind)
    if (at >= 0) {
      const [fault] = statusFaults.splice(at, 1)
      const headers: Record<string, string> = {}
      if (fault.retryAfterSeconds != null) headers['Retry-After'] = String(fault.retryAfterSeconds)
      if (fault.rateLimitResetSeconds != null) {
        headers.RateLimit = `"api";r=0;t=${fault.rateLimitResetSeconds}`
        headers['RateLimit-Policy'] = '"fixed window";"api";q=500;w=300'
      }
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
    // A gated repo: no (or a wrong) token is refused, and the hub says why
    if (token != null && req.headers.authorization !== `Bearer ${token}`) {
      const status = req.headers.authorization == null ? 401 : 403
      sendJson(res, status, { error: 'Access to this model is restricted: you must have access to it and be authenticated' }, { 'X-Error-Code': 'GatedRepo' })
      return
    }
    // A repo that does not exist looks like a private one to an anonymous client: 401, told apart by X-Error-Code
    /** The commit asked for; or null once the refusal (renamed, missing repo or revision) has been sent. */
    const commitOrRefusal = (repo: string, revision: string): Commit | null => {
      const target = renamed.get(repo)
      if (target != null) {
        // Relative, and without X-Linked-*: the real hub's answer for a renamed repo
        res.writeHead(307, { Location: url.pathname.replace(repo, target), 'Content-Length': '0' })
        res.end()
        return null
      }
      const commit = revisionOf(repo, revision)
      if (commit === 'no-repo') {
        sendJson(res, req.headers.authorization == null ? 401 : 404, { error: `Repository Not Found for url: ${url.pathname} (${repo})` },
          { 'X-Error-Code': 'RepoNotFound', 'X-Error-Message': 'Repository not found' })
        return null
      }
      if (commit === 'no-revision') {
        sendJson(res, 404, { error: 'Invalid rev id' }, { 'X-Error-Code': 'RevisionNotFound' })
        return null
      }
      return commit
    }

    const info = /^\/api\/models\/([^/]+\/[^/]+)(?:\/revision\/([^/]+))?$/.exec(url.pathname)
    if (info != null && (req.method === 'GET' || req.method === 'HEAD')) {
      const repo = decodeURIComponent(info[1])
      const commit = commitOrRefusal(repo, info[2] == null ? 'main' : decodeURIComponent(info[2]))
      if (commit == null) return
      const files = commit.files
      const withBlobs = url.searchParams.get('blobs') === 'true'
      const siblings = [...files].map(([rfilename, file]) => withBlobs
        ? {
            rfilename,
            blobId: file.gitSha1,
            size: file.bytes.length,
            ...(file.lfs ? { lfs: { sha256: file.sha256, size: file.bytes.length, pointerSize: 134 } } : {})
          }
        : { rfilename })
      sendJson(res, 200, { id: repo, modelId: repo, sha: commit.sha, private: token != null, siblings })
      return
    }

    const resolve = /^\/([^/]+\/[^/]+)\/resolve\/([^/]+)\/(.+)$/.exec(url.pathname)
    if (resolve != null && (req.method === 'GET' || req.method === 'HEAD')) {
      const repo = decodeURIComponent(resolve[1])
      const filename = resolve[3].split('/').map(decodeURIComponent).join('/')
      const commit = commitOrRefusal(repo, decodeURIComponent(resolve[2]))
      if (commit == null) return
      const file = commit.files.get(filename)
      if (file == null) {
        sendJson(res, 404, { error: 'Entry not found' }, { 'X-Error-Code': 'EntryNotFound', 'X-Repo-Commit': commit.sha })
        return
      }
      const linked: Record<string, string> = file.lfs
        ? { 'X-Linked-Etag': `"${file.sha256}"`, 'X-Linked-Size': String(file.bytes.length) }
        : {}
      if (file.lfs && redirectLfs) {
        res.writeHead(302, { Location: `${cdnUrl}/cdn/${file.sha256}`, ETag: `"${file.gitSha1}"`, 'Content-Length': '0', 'X-Repo-Commit': commit.sha, ...linked })
        res.end()
        return
      }
      serveBytes(req, res, file, { ETag: `"${file.lfs ? file.sha256 : file.gitSha1}"`, 'X-Repo-Commit': commit.sha, ...linked })
      return
    }
    sendJson(res, 404, { error: `No route for ${req.method ?? 'GET'} ${url.pathname}` })
  }

  /** A repo's commit by branch (`main`) or sha. */
  function revisionOf (repo: string, revision: string): Commit | 'no-repo' | 'no-revision' {
    const commits = repos.get(repo)
    if (commits == null) return 'no-repo'
    const commit = revision === 'main' ? commits.at(-1) : commits.find((c) => c.sha === revision)
    return commit ?? 'no-revision'
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
      // A new commit: the last one's files and this one
      const commits = repos.get(repo) ?? []
      repos.set(repo, commits)
      const files = new Map(latest(repo) ?? [])
      files.set(filename, file)
      const sha = createHash('sha1').update(`${repo}\0${commits.length}\0${filename}\0${file.sha256}`).digest('hex')
      commits.push({ sha, files })
      blobs.set(file.sha256, file)
      return { sha256: file.sha256, sizeBytes: bytes.length }
    },
    dropAfterBytes (n) { bodyFaults.push({ kind: 'drop', afterBytes: n }) },
    stallAfterBytes (n) { bodyFaults.push({ kind: 'stall', afterBytes: n }) },
    failNext (status, failOptions = {}) {
      statusFaults.push({ status, retryAfterSeconds: failOptions.retryAfterSeconds ?? null, rateLimitResetSeconds: failOptions.rateLimitResetSeconds ?? null, on: failOptions.on ?? 'any' })
    },
    renameRepo (from, to) {
      const commits = repos.get(from)
      if (commits == null) throw new Error(`no repo ${from}`)
      repos.set(to, commits)
      repos.delete(from)
      renamed.set(from, to)
    },
    commitOf (repo) {
      const sha = repos.get(repo)?.at(-1)?.sha
      if (sha == null) throw new Error(`no repo ${repo}`)
      return sha
    },
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
