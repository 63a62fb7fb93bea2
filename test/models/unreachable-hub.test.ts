// A hub that cannot be reached at all (offline, a wrong HF_ENDPOINT, a firewall) ends a download at its first failure,
// in one sentence that says what to do instead; what can recover (a hub that answered once, then dropped) is still
// retried. Through the real node and the `meshnode` command, and through downloadFile for the file server's side.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { createServer as createHttpServer } from 'node:http'
import { createServer } from 'node:net'
import { join } from 'node:path'
import { downloadFile } from '../../src/models/download.ts'
import { DownloadFailedError, HubUnreachableError } from '../../src/models/errors.ts'
import { runCli as meshnode } from '../support/cli.ts'
import { startFakeHub } from '../support/fake-hub.ts'
import { exists } from '../support/files.ts'
import { record, subscribe } from '../support/model-api.ts'
import { startTestNode, tempDir } from '../support/node.ts'
import { writeTinyGguf } from '../support/tiny-gguf.ts'

const CATALOG_ID = 'smollm2-135m-instruct-q8_0'
const FAST = { baseDelayMs: 1, maxDelayMs: 20 }

/** A loopback URL where nothing listens: a connection to it is refused. */
async function closedPortUrl (): Promise<string> {
  const server = createServer()
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as { port: number }
  await new Promise((resolve) => server.close(resolve))
  return `http://127.0.0.1:${port}`
}

/** The sentence the user gets: the cause, then every way forward. */
function assertWaysForward (text: string, hubUrl: string): void {
  assert.ok(text.includes(`Cannot reach the model hub at ${hubUrl} (`), text)
  assert.ok(text.includes('`meshnode run ./model.gguf`'), text)
  assert.ok(text.includes('HF_ENDPOINT'), text)
  assert.ok(text.includes('HTTPS_PROXY'), text)
}

test('meshnode run <catalog id> with the hub unreachable fails at the first failure, in one sentence with the ways forward', async (t) => {
  // A refused connection, and a name that cannot resolve (ENOTFOUND, or EAI_AGAIN where no DNS answers at all)
  for (const hubUrl of [await closedPortUrl(), 'http://hub.invalid']) {
    const { node, dataDir, api } = await startTestNode(t, { hfEndpoint: hubUrl })
    const events = await subscribe(t, api)

    const result = await meshnode(['run', CATALOG_ID, 'Hello', '--url', node.url, '--data-dir', dataDir])

    assert.equal(result.code, 1, result.stderr)
    assert.equal(result.stdout, '')
    assertWaysForward(result.stderr, hubUrl)
    assert.equal(result.stderr.split('\n').filter((line) => line !== '').length, 1, `one line: ${result.stderr}`)
    assert.doesNotMatch(result.stderr, /Download of|resuming in|%/, 'no retry loop, no progress bar')
    // Refused before any download began: nothing to resume, retry or clean up, and the model is as it was
    assert.equal((await record(api, CATALOG_ID)).status, 'available')
    assert.deepEqual(events.events.filter((e) => e.event.startsWith('download.')), [])
    assert.equal(await exists(join(dataDir, 'models', 'HuggingFaceTB')), false)
  }
})

test('the API refuses the download with 503 and the same sentence, for a hub file and a quantization alike', async (t) => {
  const hubUrl = await closedPortUrl()
  const { api } = await startTestNode(t, { hfEndpoint: hubUrl })
  for (const modelID of ['hf.co/acme/tiny-GGUF/tiny.gguf', 'hf.co/acme/tiny-GGUF:Q4_K_M']) {
    const res = await api.post('/v1/app/models/download', { modelID })
    assert.equal(res.status, 503, JSON.stringify(res.body))
    assert.equal(res.body.error.type, 'service_unavailable')
    assertWaysForward(res.body.error.message, hubUrl)
    assert.equal(await record(api, modelID), undefined, 'no record of a download that never started')
  }
})

test('downloadFile: a server that never answered and refuses the connection is not retried', async (t) => {
  const dir = await tempDir(t)
  const hubUrl = await closedPortUrl()
  const waits: string[] = []

  await assert.rejects(downloadFile({
    url: `${hubUrl}/acme/tiny-GGUF/resolve/main/tiny.gguf`,
    destination: join(dir, 'tiny.gguf'),
    onWait: ({ reason }) => { waits.push(reason) }
  }, FAST), (err) => {
    assert.ok(err instanceof HubUnreachableError, String(err))
    assertWaysForward(err.message, hubUrl)
    return true
  })
  assert.deepEqual(waits, [], 'no wait, so no second attempt')
})

test('downloadFile: a file server the hub redirects to that refuses the connection ends the download, naming it', async (t) => {
  const dir = await tempDir(t)
  const cdnUrl = await closedPortUrl()
  const hub = createHttpServer((request, response) => {
    response.writeHead(302, { location: `${cdnUrl}/cdn/tiny` }).end()
  })
  await new Promise<void>((resolve) => hub.listen(0, '127.0.0.1', resolve))
  t.after(() => new Promise((resolve) => { hub.closeAllConnections(); hub.close(resolve) }))
  const waits: string[] = []

  await assert.rejects(downloadFile({
    url: `http://127.0.0.1:${(hub.address() as { port: number }).port}/acme/tiny-GGUF/resolve/main/tiny.gguf`,
    destination: join(dir, 'tiny.gguf'),
    onWait: ({ reason }) => { waits.push(reason) }
  }, FAST), (err) => {
    assert.ok(err instanceof HubUnreachableError, String(err))
    assert.ok(err.message.startsWith(`Cannot reach ${new URL(cdnUrl).host}, where the hub sent the file (`), err.message)
    return true
  })
  assert.deepEqual(waits, [])
})

test('downloadFile: a hub that answered once and then refuses connections is retried as a dropped one', async (t) => {
  const dir = await tempDir(t)
  let requests = 0
  const hub = createHttpServer((request, response) => {
    requests++
    response.writeHead(503).end()
  })
  await new Promise<void>((resolve) => hub.listen(0, '127.0.0.1', resolve))
  const port = (hub.address() as { port: number }).port
  const waits: string[] = []
  let closed: Promise<unknown> | null = null

  await assert.rejects(downloadFile({
    url: `http://127.0.0.1:${port}/acme/tiny-GGUF/resolve/main/tiny.gguf`,
    destination: join(dir, 'tiny.gguf'),
    // After its first answer the hub goes away: every later attempt is refused
    onWait: ({ reason }) => {
      waits.push(reason)
      closed ??= new Promise((resolve) => { hub.closeAllConnections(); hub.close(resolve) })
    }
  }, { ...FAST, retries: 2 }), (err) => {
    assert.ok(err instanceof DownloadFailedError, String(err))
    assert.equal(err.attempts, 3)
    assert.match(err.message, /ECONNREFUSED/)
    return true
  })
  await closed
  assert.equal(requests, 1)
  assert.deepEqual(waits, ['HTTP 503', 'connection lost'])
})

test('the CLI says why it waits before the first byte on a line of its own, and names a failed download once', async (t) => {
  const hub = await startFakeHub()
  t.after(() => hub.close())
  const gguf = await writeTinyGguf(join(await tempDir(t), 'tiny.gguf'))
  await hub.addFile('acme/tiny-GGUF', 'tiny.gguf', gguf.path)
  await hub.addFile('acme/tiny-GGUF', 'gone.gguf', gguf.path)
  const { node, dataDir } = await startTestNode(t, { hfEndpoint: hub.url })
  const common = ['--url', node.url, '--data-dir', dataDir]

  hub.failNext(503, { retryAfterSeconds: 1, on: 'cdn' })
  const waited = await meshnode(['models', 'download', 'hf.co/acme/tiny-GGUF/tiny.gguf', ...common])
  assert.equal(waited.code, 0, waited.stderr)
  assert.match(waited.stderr, /^Downloading hf\.co\/acme\/tiny-GGUF\/tiny\.gguf\n {2}HTTP 503, resuming in 1 s\n/)

  hub.failNext(410, { on: 'cdn' }) // not worth a retry: the download fails with the hub's "Download of <url> failed"
  const failed = await meshnode(['models', 'download', 'hf.co/acme/tiny-GGUF/gone.gguf', ...common])
  assert.equal(failed.code, 1)
  assert.match(failed.stderr, /meshnode: Download of \S+gone\.gguf failed: HTTP 410/)
  assert.equal(failed.stderr.split('Download of').length - 1, 1, failed.stderr)
})
