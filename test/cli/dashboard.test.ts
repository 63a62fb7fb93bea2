// `meshnode dashboard`: a one-time sign-in link from the node, opened in the browser ($BROWSER here) or printed.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { chmod, readFile, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { runCli } from '../support/cli.ts'
import { startTestNode, tempDir, waitFor } from '../support/node.ts'

/** Opens the link as a browser would (no redirect followed) and returns the session cookie it set. */
async function redeem (url: string): Promise<string | null> {
  const res = await fetch(url, { redirect: 'manual' })
  assert.equal(res.status, 303)
  return res.headers.get('set-cookie')?.split(';')[0] ?? null
}

test('dashboard --no-open prints a one-time link that signs a browser in once, with network access on', async (t) => {
  const { node, dataDir, api } = await startTestNode(t)
  assert.equal((await api.patch('/v1/app/settings', { allow_network_access: true })).status, 200)
  const common = ['--url', node.url, '--data-dir', dataDir]

  const printed = await runCli(['dashboard', '--no-open', ...common])
  assert.equal(printed.code, 0, printed.stderr)
  const url = /http:\/\/\S+\/sign-in\?token=[A-Za-z0-9_-]{43}/.exec(printed.stdout)?.[0]
  assert.ok(url != null, printed.stdout)
  assert.match(printed.stdout, /works once/)
  const cookie = await redeem(url)
  assert.ok(cookie != null)
  assert.equal((await api.get('/v1/app', { cookie })).status, 200)
  assert.equal(await redeem(url), null, 'a second use signs nobody in')

  const json = await runCli(['dashboard', '--no-open', '--json', ...common])
  assert.equal(json.code, 0, json.stderr)
  const body = JSON.parse(json.stdout)
  assert.deepEqual(Object.keys(body).sort(), ['expiresAt', 'url'])

  // Without the admin token (another data dir) and without a key, the node refuses to mint a link.
  const elsewhere = await tempDir(t)
  const stranger = await runCli(['dashboard', '--no-open', '--url', node.url, '--data-dir', elsewhere])
  assert.equal(stranger.code, 1)
  assert.ok(stranger.stderr.startsWith(`meshnode: No admin token found at ${join(elsewhere, 'admin-token')}`), stranger.stderr)
  assert.match(stranger.stderr, /pass --data-dir <the node's data dir> or --api-key <key> \(HTTP 401\)/)
})

test('dashboard opens $BROWSER on the link; a missing browser leaves the link printed', async (t) => {
  const { node, dataDir, api } = await startTestNode(t)
  const dir = await tempDir(t)
  const opened = join(dir, 'opened.txt')
  const fakeBrowser = join(dir, 'browser.sh')
  await writeFile(fakeBrowser, `#!/bin/sh\nprintf '%s' "$1" > '${opened}'\n`)
  await chmod(fakeBrowser, 0o755)

  const result = await runCli(['dashboard', '--url', node.url, '--data-dir', dataDir], { env: { BROWSER: fakeBrowser } })
  assert.equal(result.code, 0, result.stderr)
  assert.match(result.stdout, /Opening the dashboard/)
  const url = await waitFor(async () => {
    try {
      return await readFile(opened, 'utf8')
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined // the browser has not started yet
      throw err
    }
  }, { what: 'the fake browser to be opened' })
  assert.ok(result.stdout.includes(url), 'the same link is printed, in case the browser does not come up')
  const cookie = await redeem(url)
  assert.ok(cookie != null)
  assert.equal((await api.get('/v1/app/session', { cookie })).status, 200)

  const missing = await runCli(['dashboard', '--url', node.url, '--data-dir', dataDir], { env: { BROWSER: join(dir, 'no-such-browser') } })
  assert.equal(missing.code, 0, missing.stderr)
  assert.match(missing.stdout, /Could not start a browser[\s\S]*\/sign-in\?token=/)
})
