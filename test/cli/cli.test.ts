import { test } from 'node:test'
import { runCli as meshnode } from '../support/cli.ts'
import assert from 'node:assert/strict'
import { writeFile } from 'node:fs/promises'
import { createServer as createHttpServer } from 'node:http'
import { createServer } from 'node:net'
import { networkInterfaces } from 'node:os'
import { join } from 'node:path'
import { spawn } from 'node:child_process'
import { isLoopbackUrl } from '../../src/cli/client.ts'
import { ADMIN_TOKEN_FILE } from '../../src/config.ts'
import { CLI, exitOf, spawnNodeProcess, startTestNode, tempDir, waitFor } from '../support/node.ts'

test('serve answers /health after start and exits 0 on SIGTERM, closing the database', async (t) => {
  const dataDir = await tempDir(t)
  const proc = await spawnNodeProcess(t, ['--data-dir', dataDir, '--name', 'cli-node'])
  const health = await waitFor(async () => {
    const res = await fetch(proc.url + '/health')
    return res.ok ? await res.json() as { status: string } : undefined
  })
  // How soon is measured in bench/ (bench:http), not asserted here: a busy machine would fail any fixed bound.
  assert.equal(health.status, 'ok')
  proc.child.kill('SIGTERM')
  const exit = await exitOf(proc.child)
  assert.deepEqual(exit, { code: 0, signal: null })
  assert.match(proc.output(), /shutting down/)
})

test('serve on a taken port exits non-zero with a clear message', async (t) => {
  const blocker = createServer()
  await new Promise<void>((resolve) => blocker.listen(0, '127.0.0.1', resolve))
  t.after(() => blocker.close())
  const port = (blocker.address() as { port: number }).port
  const dataDir = await tempDir(t)
  const result = await meshnode(['serve', '--port', String(port), '--data-dir', dataDir])
  assert.equal(result.code, 1)
  assert.match(result.stderr, new RegExp(`port ${port} on 127.0.0.1 is already in use`))
})

test('status, config get/set and apikeys list/generate/revoke talk to the node over HTTP', async (t) => {
  const { node, dataDir } = await startTestNode(t, { name: 'cli-target' })
  const common = ['--url', node.url, '--data-dir', dataDir]

  const status = await meshnode(['status', ...common])
  assert.equal(status.code, 0, status.stderr)
  assert.match(status.stdout, /cli-target/)
  assert.match(status.stdout, /network access\s+off/)
  const statusJson = JSON.parse((await meshnode(['status', ...common, '--json'])).stdout)
  assert.equal(statusJson.node.nodeID, node.identity.nodeID)

  const set = await meshnode(['config', 'set', 'max_storage_gb', '33', ...common])
  assert.equal(set.code, 0, set.stderr)
  assert.match(set.stdout, /max_storage_gb = 33/)
  assert.equal((await meshnode(['config', 'get', 'max_storage_gb', ...common])).stdout.trim(), '33')
  const passcode = await meshnode(['config', 'set', 'cluster_passcode', '1234', ...common])
  assert.equal(passcode.code, 0, 'a digits-only passcode stays a string')
  const bad = await meshnode(['config', 'set', 'org_capacity_reservation', '2', ...common])
  assert.equal(bad.code, 2, 'a value out of range is a wrong command line')
  assert.match(bad.stderr, /^meshnode: org_capacity_reservation must be a number from 0 to 1, not "2"$/m)

  const generated = await meshnode(['apikeys', 'generate', 'cli-key', ...common, '--json'])
  const key = JSON.parse(generated.stdout)
  assert.match(key.key, /^mn_/)
  const list = await meshnode(['apikeys', 'list', ...common])
  assert.match(list.stdout, /^ID\s+NAME\s+PREFIX/m)
  assert.ok(list.stdout.includes(key.id) && !list.stdout.includes(key.key))

  // With network access on, the CLI still administers the node through the local admin-token.
  assert.equal((await meshnode(['config', 'set', 'allow_network_access', 'true', ...common])).code, 0)
  const revoked = await meshnode(['apikeys', 'revoke', key.id, ...common])
  assert.equal(revoked.code, 0, revoked.stderr)
  assert.match(revoked.stdout, new RegExp(`Revoked ${key.id}`))
  const wrongKey = await meshnode(['status', '--url', node.url, '--api-key', key.key])
  assert.equal(wrongKey.code, 1)
  assert.match(wrongKey.stderr, /Invalid or revoked API key \(HTTP 401\)/)
})

test('the local admin-token goes only to a node on this machine; another host gets no key unless --api-key or $MESHNODE_API_KEY gives one', async (t) => {
  const dataDir = await tempDir(t)
  await writeFile(join(dataDir, ADMIN_TOKEN_FILE), 'local-admin-token\n', { mode: 0o600 })
  // Stands in for a node, on every address of this machine, and notes the Authorization each request carried
  const seen: Array<string | null> = []
  const listener = createHttpServer((request, response) => {
    seen.push(request.headers.authorization ?? null)
    response.writeHead(401, { 'content-type': 'application/json' })
    response.end(JSON.stringify({ error: { message: 'An API key is required', type: 'authentication_error', param: null, code: 'missing_api_key' } }))
  })
  await new Promise<void>((resolve) => listener.listen(0, '0.0.0.0', resolve))
  t.after(() => { listener.close() })
  const port = (listener.address() as { port: number }).port
  let stderr = ''
  /** The Authorization header `meshnode status --url <url>` sent; what it printed is left in `stderr`. */
  const sent = async (url: string, args: string[] = [], env: Record<string, string> = {}): Promise<string | null> => {
    const before = seen.length
    const result = await meshnode(['status', '--url', url, '--data-dir', dataDir, ...args], { env })
    assert.equal(result.code, 1, result.stderr)
    assert.equal(seen.length, before + 1, `one request reached the listener: ${result.stderr}`)
    stderr = result.stderr
    return seen[seen.length - 1]
  }

  assert.equal(await sent(`http://127.0.0.1:${port}`), 'Bearer local-admin-token', 'the node on this machine gets the admin-token')
  assert.equal(stderr, 'meshnode: An API key is required (HTTP 401)\n', 'a refused key: the node\'s own words')
  assert.equal(await sent(`http://127.0.0.1:${port}/v1`, ['--api-key', 'chosen']), 'Bearer chosen')

  // The same listener through an address other machines reach it by: it could be anyone's node
  const address = Object.values(networkInterfaces()).flat().find((a) => a != null && a.family === 'IPv4' && !a.internal)?.address
  await t.test('through a non-loopback address', { skip: address == null ? 'this machine has no non-loopback IPv4 address' : false }, async () => {
    const remote = `http://${address ?? ''}:${port}`
    assert.equal(await sent(remote), null, 'no admin-token to another host')
    assert.equal(stderr, `meshnode: The node at ${remote} asks for an API key: pass --api-key <key> (the local admin token is sent only to a node on this machine) (HTTP 401)\n`)
    assert.equal(await sent(remote, ['--api-key', 'chosen']), 'Bearer chosen', '--api-key is sent wherever it is asked to go')
    assert.equal(await sent(remote, [], { MESHNODE_API_KEY: 'from-env' }), 'Bearer from-env', 'so is $MESHNODE_API_KEY')
  })

  // What counts as this machine: the loopback ranges as the URL parser writes them, and the name localhost
  for (const url of ['http://127.0.0.1:11435', 'http://127.1:11435', 'http://127.9.8.7', 'http://localhost:11435/v1', 'http://[::1]:11435', 'http://[::ffff:127.0.0.1]']) {
    assert.equal(isLoopbackUrl(url), true, url)
  }
  for (const url of ['http://192.0.2.1:11435', 'http://friend:11435', 'http://localhost.example.com', 'http://127.0.0.1.example.com', 'http://128.0.0.1', 'http://[2001:db8::1]', 'http://[::ffff:192.0.2.1]', 'not a url']) {
    assert.equal(isLoopbackUrl(url), false, url)
  }
})

test('with network access on and no admin-token in --data-dir, a client command says where it looked and what to pass', async (t) => {
  const { node, api } = await startTestNode(t)
  assert.equal((await api.patch('/v1/app/settings', { allow_network_access: true })).status, 200)
  const elsewhere = await tempDir(t)
  const result = await meshnode(['status', '--url', node.url, '--data-dir', elsewhere])
  assert.equal(result.code, 1)
  assert.equal(result.stderr, `meshnode: No admin token found at ${join(elsewhere, ADMIN_TOKEN_FILE)}, and the node asks for a key: ` +
    'pass --data-dir <the node\'s data dir> or --api-key <key> (HTTP 401)\n')
})

test('a client command against no node says how to start one', async (t) => {
  const blocker = createServer()
  await new Promise<void>((resolve) => blocker.listen(0, '127.0.0.1', resolve))
  const port = (blocker.address() as { port: number }).port
  await new Promise((resolve) => blocker.close(resolve))
  const dataDir = await tempDir(t)
  const result = await meshnode(['status', '--port', String(port), '--data-dir', dataDir])
  assert.equal(result.code, 1)
  assert.match(result.stderr, /Cannot reach the node .*meshnode serve/)
})

test('serve refuses out-of-range numeric options with a usage error naming the option', async (t) => {
  const dataDir = await tempDir(t)
  for (const [option, value, range] of [['--port', '70000', '0 to 65535'], ['--slots', '0', '1 to 64'], ['--threads', 'many', '1 to 256'], ['--queue-size', '-1', '0 to 10000'], ['--context-size', '64', '128 to 1048576']]) {
    const result = await meshnode(['serve', option, value, '--data-dir', dataDir])
    assert.equal(result.code, 2, option)
    assert.ok(result.stderr.includes(`${option} must be a whole number from ${range}, not ${value}`), result.stderr)
  }
})

test('serve refuses an unknown --flash-attention mode with a usage error naming the choices', async (t) => {
  const result = await meshnode(['serve', '--flash-attention', 'fast', '--data-dir', await tempDir(t)])
  assert.equal(result.code, 2)
  assert.ok(result.stderr.includes('--flash-attention must be one of auto, on, off, not fast'), result.stderr)
})

test('serve --log-format pretty writes human lines; --log-format json and --log-level choose the rest; bad values are usage errors', async (t) => {
  const dataDir = await tempDir(t)
  const child = spawn(process.execPath, [CLI, 'serve', '--port', '0', '--data-dir', dataDir, '--log-format', 'pretty', '--log-level', 'debug'], { stdio: ['ignore', 'pipe', 'pipe'] })
  t.after(() => { if (child.exitCode == null) child.kill('SIGKILL') })
  let out = ''
  child.stdout.on('data', (chunk: Buffer) => { out += chunk.toString() })
  const port = await waitFor(() => /^\d\d:\d\d:\d\d\.\d{3} INFO {2}meshnode is listening nodeID=[0-9a-f]{64} port=(\d+) dataDir=/m.exec(out)?.[1], { timeoutMs: 60_000, what: 'the pretty listening line' })
  assert.equal((await fetch(`http://127.0.0.1:${port}/nowhere`)).status, 404)
  await waitFor(() => /DEBUG request refused type=not_found/.test(out), { what: 'the debug line of a refusal (--log-level debug)' })
  child.kill('SIGTERM')
  assert.deepEqual(await exitOf(child), { code: 0, signal: null })
  assert.ok(!out.split('\n').some((line) => line.startsWith('{')), 'no JSON line')

  for (const [option, value, message] of [['--log-format', 'xml', '--log-format must be auto, json or pretty, not xml'], ['--log-level', 'loud', '--log-level must be one of trace, debug, info, warn, error, fatal, silent, not loud']]) {
    const result = await meshnode(['serve', option, value, '--data-dir', dataDir])
    assert.equal(result.code, 2, option)
    assert.ok(result.stderr.includes(`meshnode: ${message}`), result.stderr)
  }
})
