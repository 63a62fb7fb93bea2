import { test } from 'node:test'
import type { TestContext } from 'node:test'
import assert from 'node:assert/strict'
import { createHash, randomBytes } from 'node:crypto'
import { mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { downloadFile } from '../../src/models/download.ts'
import type { DownloadProgress } from '../../src/models/download.ts'
import { DownloadFailedError, DownloadNotFoundError, DownloadTooLargeError, IntegrityError } from '../../src/models/errors.ts'
import { startFakeHub } from '../support/fake-hub.ts'
import type { FakeHub, FakeHubOptions } from '../support/fake-hub.ts'
import { writeTinyGguf } from '../support/tiny-gguf.ts'
import { exists } from '../support/files.ts'

const REPO = 'meshnode-test/tiny-GGUF'
const FILE = 'tiny-f32.gguf'
const FAST = { baseDelayMs: 1, maxDelayMs: 20 } // backoffs short enough that retries cost no test time

interface Fixture { hub: FakeHub, dir: string, url: string, bytes: Buffer, sha256: string }

/** A hub holding one file of random bytes (a few MB, so a transfer spans several chunks) and a temp dir. */
async function fixture (t: TestContext, hubOptions: FakeHubOptions = {}, sizeBytes = 3 * 1024 * 1024): Promise<Fixture> {
  const dir = await mkdtemp(join(tmpdir(), 'meshnode-download-'))
  t.after(() => rm(dir, { recursive: true, force: true }))
  const hub = await startFakeHub(hubOptions)
  t.after(() => hub.close())
  const bytes = randomBytes(sizeBytes)
  const { sha256 } = await hub.addFile(REPO, FILE, bytes)
  return { hub, dir, url: `${hub.url}/${REPO}/resolve/main/${FILE}`, bytes, sha256 }
}

function fileRequests (hub: FakeHub): FakeHub['requests'] {
  return hub.requests.filter((r) => r.path.includes('/resolve/') || r.path.startsWith('/cdn/'))
}

await test('downloads a GGUF through the CDN redirect and verifies its sha256 from X-Linked-Etag', async (t) => {
  const { hub, dir } = await fixture(t)
  const gguf = await writeTinyGguf(join(dir, 'source.gguf'))
  await hub.addFile(REPO, 'model.gguf', gguf.path)
  const destination = join(dir, 'model.gguf')

  const result = await downloadFile({ url: `${hub.url}/${REPO}/resolve/main/model.gguf`, destination })

  assert.deepEqual(result, { path: destination, sha256: gguf.sha256, sizeBytes: gguf.sizeBytes })
  assert.equal(createHash('sha256').update(await readFile(destination)).digest('hex'), gguf.sha256)
  assert.equal(await exists(`${destination}.part`), false)
  assert.deepEqual(hub.requests.map((r) => [r.server, r.status]), [['hub', 302], ['cdn', 200]])
})

await test('progress rises monotonically and ends at the total', async (t) => {
  const { dir, url, bytes, sha256 } = await fixture(t)
  const seen: DownloadProgress[] = []
  const result = await downloadFile({ url, destination: join(dir, 'f.gguf'), onProgress: (p) => seen.push(p) })

  assert.equal(result.sha256, sha256)
  assert.ok(seen.length >= 2, 'a first report as bytes arrive and a final one')
  for (let i = 1; i < seen.length; i++) assert.ok(seen[i].receivedBytes >= seen[i - 1].receivedBytes)
  assert.ok(seen.every((p) => p.totalBytes === bytes.length && p.bytesPerSecond >= 0))
  assert.deepEqual(seen.at(-1), { ...seen.at(-1), receivedBytes: bytes.length, totalBytes: bytes.length, etaSeconds: 0 })
})

await test('a connection dropped mid-body resumes with a Range request from where it stopped', async (t) => {
  const { hub, dir, url, bytes, sha256 } = await fixture(t)
  hub.dropAfterBytes(1024 * 1024)
  const destination = join(dir, 'f.gguf')

  const result = await downloadFile({ url, destination }, FAST)

  assert.equal(result.sha256, sha256)
  assert.deepEqual(await readFile(destination), bytes)
  const cdn = fileRequests(hub).filter((r) => r.server === 'cdn')
  assert.deepEqual(cdn.map((r) => r.status), [200, 206])
  assert.equal(cdn[0].range, null)
  // The server cut the socket after 1 MiB; a reset may discard bytes still in flight, so the resume starts at what
  // actually arrived: never beyond the cut, never from the start.
  const from = Number(/^bytes=(\d+)-$/.exec(cdn[1].range ?? '')?.[1])
  assert.ok(from > 0 && from <= 1024 * 1024, `resumed from byte ${from}`)
})

await test('an aborted download keeps its .part and a later call resumes it', async (t) => {
  const { hub, dir, url, bytes, sha256 } = await fixture(t)
  hub.stallAfterBytes(512 * 1024) // the first transfer cannot finish before we abort it
  const destination = join(dir, 'f.gguf')
  const controller = new AbortController()
  const reason = new Error('the node is shutting down')

  await assert.rejects(downloadFile({
    url,
    destination,
    signal: controller.signal,
    onProgress: () => controller.abort(reason)
  }), (err) => err === reason)
  const kept = (await stat(`${destination}.part`)).size
  assert.ok(kept > 0 && kept < bytes.length, `kept ${kept} bytes`)
  assert.equal(await exists(destination), false)

  const result = await downloadFile({ url, destination }) // as after a restart: nothing but the .part remembers
  assert.equal(result.sha256, sha256)
  assert.deepEqual(await readFile(destination), bytes)
  assert.equal(fileRequests(hub).at(-1)?.range, `bytes=${kept}-`)
})

await test('a stalled connection is dropped after the idle timeout and resumed with a Range request', async (t) => {
  const { hub, dir, url, bytes, sha256 } = await fixture(t)
  hub.stallAfterBytes(512 * 1024) // sends these bytes, then nothing, and never closes
  const destination = join(dir, 'f.gguf')

  const result = await downloadFile({ url, destination }, { ...FAST, idleTimeoutMs: 300 })

  assert.equal(result.sha256, sha256)
  assert.deepEqual(await readFile(destination), bytes)
  const cdn = fileRequests(hub).filter((r) => r.server === 'cdn')
  assert.equal(cdn.length, 2)
  assert.match(cdn[1].range ?? '', /^bytes=\d+-$/)
  assert.equal(cdn[1].status, 206)
})

await test('a complete .part left before the rename is verified, not fetched again', async (t) => {
  const { hub, dir, url, bytes, sha256 } = await fixture(t)
  const destination = join(dir, 'f.gguf')
  await writeFile(`${destination}.part`, bytes)

  const result = await downloadFile({ url, destination })

  assert.equal(result.sha256, sha256)
  assert.deepEqual(fileRequests(hub).map((r) => [r.server, r.status]), [['hub', 302], ['cdn', 416]])
})

await test('a .part longer than the file (a stale one) is thrown away and the file fetched anew', async (t) => {
  const { hub, dir, url, bytes, sha256 } = await fixture(t)
  const destination = join(dir, 'f.gguf')
  await writeFile(`${destination}.part`, Buffer.concat([bytes, Buffer.from('stale tail')]))

  const result = await downloadFile({ url, destination })

  assert.equal(result.sha256, sha256)
  assert.deepEqual(fileRequests(hub).filter((r) => r.server === 'cdn').map((r) => r.status), [416, 200])
})

await test('a server that ignores Range sends everything again, and the .part starts over', async (t) => {
  const { hub, dir, url, bytes, sha256 } = await fixture(t)
  const destination = join(dir, 'f.gguf')
  await writeFile(`${destination}.part`, bytes.subarray(0, 1000))
  hub.ignoreRangeNext()

  const result = await downloadFile({ url, destination })

  assert.equal(result.sha256, sha256)
  assert.deepEqual(await readFile(destination), bytes)
})

await test('a 503 with Retry-After is waited out, then the download succeeds', async (t) => {
  const { hub, dir, url, sha256 } = await fixture(t)
  hub.failNext(503, { retryAfterSeconds: 1 })
  hub.failNext(429)
  const started = performance.now()

  const result = await downloadFile({ url, destination: join(dir, 'f.gguf') }, { baseDelayMs: 1, maxDelayMs: 5000 })

  assert.equal(result.sha256, sha256)
  assert.ok(performance.now() - started >= 950, 'waited for Retry-After, not the 1 ms backoff')
  assert.deepEqual(fileRequests(hub).map((r) => r.status), [503, 429, 302, 200])
})

await test('retries run out with a typed error naming the attempts', async (t) => {
  const { hub, dir, url } = await fixture(t)
  for (let i = 0; i < 3; i++) hub.failNext(503)
  const destination = join(dir, 'f.gguf')

  await assert.rejects(downloadFile({ url, destination }, { ...FAST, retries: 2 }), (err) => {
    assert.ok(err instanceof DownloadFailedError)
    assert.equal(err.status, 503)
    assert.equal(err.attempts, 3)
    assert.equal(err.code, 'download_failed')
    return true
  })
  assert.equal(hub.requests.length, 3)
})

await test('a corrupted byte fails the integrity check and leaves no file behind', async (t) => {
  const { hub, dir, url, sha256 } = await fixture(t)
  hub.corruptNext()
  const destination = join(dir, 'f.gguf')

  await assert.rejects(downloadFile({ url, destination }, FAST), (err) => {
    assert.ok(err instanceof IntegrityError)
    assert.equal(err.expected, sha256)
    assert.match(err.message, new RegExp(`expected sha256 ${sha256}, got [0-9a-f]{64}`))
    return true
  })
  assert.equal(await exists(destination), false)
  assert.equal(await exists(`${destination}.part`), false)
})

await test('an expectedSha256 from the caller is checked too', async (t) => {
  const { hub, dir } = await fixture(t)
  await hub.addFile(REPO, 'README.md', Buffer.from('# tiny\n'), { lfs: false }) // no X-Linked-Etag: a git file
  const url = `${hub.url}/${REPO}/resolve/main/README.md`

  await assert.rejects(downloadFile({ url, destination: join(dir, 'a.md'), expectedSha256: 'ab'.repeat(32) }), IntegrityError)
  const result = await downloadFile({ url, destination: join(dir, 'b.md') })
  assert.equal(result.sha256, createHash('sha256').update('# tiny\n').digest('hex'))
})

await test('a file over maxBytes is refused before any byte when its size is announced', async (t) => {
  const { hub, dir, url, bytes } = await fixture(t)
  const destination = join(dir, 'f.gguf')

  await assert.rejects(downloadFile({ url, destination, maxBytes: bytes.length - 1 }), (err) => {
    assert.ok(err instanceof DownloadTooLargeError)
    assert.equal(err.sizeBytes, bytes.length)
    return true
  })
  assert.equal(await exists(destination), false)
  assert.equal(await exists(`${destination}.part`), false)
  assert.deepEqual(fileRequests(hub).map((r) => r.server), ['hub'], 'X-Linked-Size sufficed: the CDN was never asked')
})

await test('a file over maxBytes is stopped while streaming when its size is unknown', async (t) => {
  const { hub, dir } = await fixture(t)
  await hub.addFile(REPO, 'stream.bin', randomBytes(2 * 1024 * 1024), { lfs: false, chunked: true })
  const destination = join(dir, 'stream.bin')

  await assert.rejects(
    downloadFile({ url: `${hub.url}/${REPO}/resolve/main/stream.bin`, destination, maxBytes: 1024 * 1024 }),
    DownloadTooLargeError)
  assert.equal(await exists(destination), false)
  assert.equal(await exists(`${destination}.part`), false)
})

await test('a missing file is a typed not-found error at once, with no retries', async (t) => {
  const { hub, dir } = await fixture(t)
  const destination = join(dir, 'none.gguf')

  await assert.rejects(downloadFile({ url: `${hub.url}/${REPO}/resolve/main/none.gguf`, destination }, FAST), (err) => {
    assert.ok(err instanceof DownloadNotFoundError)
    assert.equal(err.status, 404)
    assert.match(err.message, /Entry not found/)
    return true
  })
  assert.equal(hub.requests.length, 1)
  assert.equal(await exists(`${destination}.part`), false)
})

await test('the token goes to the hub and never to the CDN on another origin', async (t) => {
  const { hub, dir, url, sha256 } = await fixture(t, { token: 'hf_secret' })

  await assert.rejects(downloadFile({ url, destination: join(dir, 'a.gguf') }), (err) => {
    assert.ok(err instanceof DownloadFailedError)
    assert.equal(err.status, 401)
    return true
  })
  const result = await downloadFile({ url, destination: join(dir, 'b.gguf'), token: 'hf_secret' })

  assert.equal(result.sha256, sha256)
  assert.deepEqual(hub.requests.slice(1).map((r) => [r.server, r.authorization]),
    [['hub', 'Bearer hf_secret'], ['cdn', null]])
})
