import { test } from 'node:test'
import { runCli as meshnode } from '../support/cli.ts'
import assert from 'node:assert/strict'
import { createServer } from 'node:net'
import { spawn } from 'node:child_process'
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
