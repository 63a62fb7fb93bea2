// allow_network_access opens the API to the network at once and closes it again, optionally over TLS.
import { test, type TestContext } from 'node:test'
import assert from 'node:assert/strict'
import { execFile, spawn, spawnSync } from 'node:child_process'
import { readFile } from 'node:fs/promises'
import { request as httpsRequest } from 'node:https'
import { join } from 'node:path'
import { promisify } from 'node:util'
import { whyNetnsUnavailable } from '../support/netns.ts'
import { CLI, startTestNode, tempDir, waitFor } from '../support/node.ts'

const run = promisify(execFile)

/** A plain GET from this process; the status, or the error code when nothing answers at that address. */
async function reach (url: string, headers: Record<string, string> = {}): Promise<number | string> {
  try {
    return (await fetch(url, { headers: { connection: 'close', ...headers } })).status
  } catch (err) {
    return ((err as { cause?: { code?: string } }).cause?.code) ?? String(err)
  }
}

test('network access on: the API listens on the network address as well, at once; off: loopback only again (--network-host)', async (t) => {
  // 127.0.0.2 is a second address of this machine that the loopback listener (127.0.0.1) does not cover.
  const { api, node } = await startTestNode(t, { networkHost: '127.0.0.2' })
  const { body: key } = await api.post('/v1/app/apikeys', { name: 'remote' })
  const remote = `http://127.0.0.2:${node.port}`
  assert.equal(await reach(`${remote}/health`), 'ECONNREFUSED', 'off: nothing listens there')
  assert.deepEqual(node.networkAddresses(), [])

  assert.equal((await api.patch('/v1/app/settings', { allow_network_access: true })).status, 200)
  await waitFor(async () => await reach(`${remote}/health`) === 200, { what: 'the network listener to open' })
  assert.equal(await reach(`${remote}/v1/app`), 401, 'a key is needed there')
  assert.equal(await reach(`${remote}/v1/app`, { authorization: `Bearer ${key.key}` }), 200)
  assert.deepEqual(node.networkAddresses(), [`127.0.0.2:${node.port}`])

  const off = await api.patch('/v1/app/settings', { allow_network_access: false }, { authorization: `Bearer ${key.key}` })
  assert.equal(off.status, 200)
  await waitFor(async () => await reach(`${remote}/health`) === 'ECONNREFUSED', { what: 'the network listener to close' })
  assert.equal(await reach(`${node.url}/v1/app`), 200, 'loopback goes on, without a key again')
})

test('a --network-host the machine does not have: the start is refused when network access is already on', async (t) => {
  const first = await startTestNode(t)
  await first.api.patch('/v1/app/settings', { allow_network_access: true })
  await first.node.close()
  await assert.rejects(startTestNode(t, { dataDir: first.dataDir, networkHost: '192.0.2.77' }), /Cannot listen on 192\.0\.2\.77/)
})

/** A self-signed certificate for 127.0.0.2, made by openssl; null when openssl is not installed. */
async function selfSigned (t: TestContext): Promise<{ certFile: string, keyFile: string } | null> {
  if (spawnSync('openssl', ['version']).status !== 0) return null
  const dir = await tempDir(t)
  const certFile = join(dir, 'cert.pem')
  const keyFile = join(dir, 'key.pem')
  await run('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-days', '1',
    '-subj', '/CN=meshnode-test', '-addext', 'subjectAltName=IP:127.0.0.2', '-keyout', keyFile, '-out', certFile])
  return { certFile, keyFile }
}

async function httpsStatus (url: string, ca: Buffer, headers: Record<string, string> = {}): Promise<number> {
  return await new Promise((resolve, reject) => {
    const req = httpsRequest(url, { ca, headers: { connection: 'close', ...headers } }, (res) => {
      res.resume()
      res.on('end', () => { resolve(res.statusCode ?? 0) })
    })
    req.on('error', reject)
    req.end()
  })
}

test('--tls-cert/--tls-key: the network listener speaks HTTPS with that certificate; loopback stays plain HTTP', async (t) => {
  const tls = await selfSigned(t)
  if (tls == null) {
    t.skip('openssl is not installed: it makes the self-signed certificate this test needs')
    return
  }
  const { api, node } = await startTestNode(t, { networkHost: '127.0.0.2', tls })
  const { body: key } = await api.post('/v1/app/apikeys', { name: 'tls' })
  await api.patch('/v1/app/settings', { allow_network_access: true })
  const ca = await readFile(tls.certFile)
  const remote = `https://127.0.0.2:${node.port}`
  await waitFor(async () => await httpsStatus(`${remote}/health`, ca).catch(() => 0) === 200, { what: 'the HTTPS listener' })
  assert.equal(await httpsStatus(`${remote}/v1/app`, ca, { authorization: `Bearer ${key.key}` }), 200)
  await assert.rejects(httpsStatus(`${remote}/health`, Buffer.from('')), 'a client that does not trust the certificate is refused by TLS')
  assert.notEqual(await reach(`http://127.0.0.2:${node.port}/health`), 200, 'no plain HTTP on the network listener')
  assert.equal(await reach(`${node.url}/health`), 200, 'loopback is plain HTTP')
  await assert.rejects(startTestNode(t, { host: '0.0.0.0', tls }), /keep --host on loopback/)
})

const netnsUnavailable = whyNetnsUnavailable()

async function ip (...args: string[]): Promise<void> {
  await run('ip', args)
}

/** Status of a GET from inside namespace `ns`, or the error code when nothing answers (a plain node script). */
async function reachFrom (ns: string, url: string, authorization = ''): Promise<number | string> {
  const script = 'const [url, auth] = process.argv.slice(1); fetch(url, { headers: auth === "" ? {} : { authorization: auth } })' +
    '.then((r) => { process.stdout.write(String(r.status)) }, (e) => { process.stdout.write(String(e.cause?.code ?? e)) })'
  const { stdout } = await run('ip', ['netns', 'exec', ns, process.execPath, '-e', script, url, authorization])
  return /^\d+$/.test(stdout) ? Number(stdout) : stdout
}

test('in network namespaces: switching network access on makes the API reachable from another machine; off, unreachable again',
  { skip: netnsUnavailable ?? false }, async (t) => {
    const tag = (process.pid % 10000).toString(36)
    const subnet = `10.78.${process.pid % 250}`
    const server = `mnsv${tag}`
    const client = `mncl${tag}`
    for (const ns of [server, client]) {
      await ip('netns', 'add', ns)
      t.after(() => ip('netns', 'del', ns))
      await ip('-n', ns, 'link', 'set', 'lo', 'up')
    }
    // One cable between the two machines.
    await ip('link', 'add', 'name', 'eth0', 'netns', server, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', client)
    await ip('-n', server, 'addr', 'add', `${subnet}.1/24`, 'dev', 'eth0')
    await ip('-n', client, 'addr', 'add', `${subnet}.2/24`, 'dev', 'eth0')
    await ip('-n', server, 'link', 'set', 'eth0', 'up')
    await ip('-n', client, 'link', 'set', 'eth0', 'up')

    const dataDir = await tempDir(t)
    const child = spawn('ip', ['netns', 'exec', server, process.execPath, CLI, 'serve', '--port', '0', '--data-dir', dataDir], {
      env: { ...process.env, MESHNODE_LOG_LEVEL: 'info' }, stdio: ['ignore', 'pipe', 'pipe']
    })
    t.after(() => { if (child.exitCode == null && child.signalCode == null) child.kill('SIGKILL') })
    let out = ''
    child.stdout.on('data', (chunk: Buffer) => { out += chunk.toString() })
    child.stderr.on('data', (chunk: Buffer) => { out += chunk.toString() })
    const port = await waitFor(() => {
      if (child.exitCode != null) throw new Error(`node exited with ${child.exitCode}: ${out}`)
      const line = out.split('\n').find((l) => l.includes('meshnode is listening'))
      return line == null ? undefined : (JSON.parse(line) as { port: number }).port
    }, { timeoutMs: 30_000, what: 'the node in its namespace to listen' })
    // The owner, on the server machine itself, drives the node with the CLI (the admin token).
    const owner = async (...args: string[]): Promise<string> => {
      const { stdout } = await run('ip', ['netns', 'exec', server, process.execPath, CLI, ...args, '--port', String(port), '--data-dir', dataDir, '--json'],
        { env: { ...process.env, MESHNODE_API_KEY: '' } })
      return stdout
    }
    const key = (JSON.parse(await owner('apikeys', 'generate', 'laptop')) as { key: string }).key
    const url = `http://${subnet}.1:${port}`

    assert.equal(await reachFrom(client, `${url}/health`), 'ECONNREFUSED', 'off: the other machine reaches nothing')
    await owner('config', 'set', 'allow_network_access', 'true')
    await waitFor(async () => await reachFrom(client, `${url}/health`) === 200, { what: 'the API to be reachable from the other machine' })
    assert.equal(await reachFrom(client, `${url}/v1/app`), 401)
    assert.equal(await reachFrom(client, `${url}/v1/app`, `Bearer ${key}`), 200)

    await owner('config', 'set', 'allow_network_access', 'false')
    await waitFor(async () => await reachFrom(client, `${url}/health`) === 'ECONNREFUSED', { what: 'the API to be unreachable again' })
    assert.equal(JSON.parse(await owner('config', 'get', 'allow_network_access')), false, 'the node serves on, on loopback')
  })
