// LAN cluster by mDNS, on a LAN of our own: network namespaces joined by a bridge, one node process in each. Needs
// root (and iproute2); skipped with a message otherwise. The namespaces exist on this machine only and are deleted
// when the test ends.
import { test, type TestContext } from 'node:test'
import assert from 'node:assert/strict'
import { execFile, spawn, type ChildProcess } from 'node:child_process'
import { promisify } from 'node:util'
import { whyNetnsUnavailable } from '../support/netns.ts'
import { CLI, tempDir, waitFor } from '../support/node.ts'

const run = promisify(execFile)

async function ip (...args: string[]): Promise<void> {
  await run('ip', args)
}

interface LanNode {
  ns: string
  dataDir: string
  port: number
  nodeID: string
  child: ChildProcess
  output: () => string
  /** Runs a meshnode client command inside the node's namespace, against it. */
  cli (...args: string[]): Promise<string>
  /** One HTTP request to the node's API from inside its namespace (a plain node script: faster than the CLI). */
  api (method: string, path: string, body?: unknown): Promise<any> // eslint-disable-line @typescript-eslint/no-explicit-any
}

// Reads the answer's JSON; the node is reached on its loopback, inside the namespace.
const FETCH_SCRIPT = 'const [url, method, body] = process.argv.slice(1); ' +
  'fetch(url, { method, headers: { "content-type": "application/json" }, body: body === "" ? undefined : body })' +
  '.then(async (r) => { process.stdout.write(await r.text()); if (!r.ok) process.exitCode = 1 })'

/** A bridge in its own namespace and `count` namespaces wired to it, each with 10.77.<pid>.<i>/24. */
async function buildLan (t: TestContext, count: number): Promise<string[]> {
  const tag = (process.pid % 10000).toString(36)
  const bridgeNs = `mnbr${tag}`
  const subnet = `10.77.${process.pid % 250}`
  await ip('netns', 'add', bridgeNs)
  t.after(() => ip('netns', 'del', bridgeNs))
  await ip('-n', bridgeNs, 'link', 'add', 'br0', 'type', 'bridge')
  await ip('-n', bridgeNs, 'link', 'set', 'br0', 'up')
  const namespaces: string[] = []
  for (let i = 1; i <= count; i++) {
    const ns = `mnn${tag}x${i}`
    await ip('netns', 'add', ns)
    t.after(() => ip('netns', 'del', ns))
    await ip('link', 'add', 'name', 'eth0', 'netns', ns, 'type', 'veth', 'peer', 'name', `p${i}`, 'netns', bridgeNs)
    await ip('-n', bridgeNs, 'link', 'set', `p${i}`, 'master', 'br0', 'up')
    await ip('-n', ns, 'link', 'set', 'lo', 'up')
    await ip('-n', ns, 'addr', 'add', `${subnet}.${i}/24`, 'dev', 'eth0')
    await ip('-n', ns, 'link', 'set', 'eth0', 'up')
    await ip('-n', ns, 'route', 'add', '224.0.0.0/4', 'dev', 'eth0')   // where mDNS queries go
    namespaces.push(ns)
  }
  return namespaces
}

async function startLanNode (t: TestContext, ns: string): Promise<LanNode> {
  const dataDir = await tempDir(t)
  const child = spawn('ip', ['netns', 'exec', ns, process.execPath, CLI, 'serve', '--port', '0', '--data-dir', dataDir], {
    env: { ...process.env, MESHNODE_LOG_LEVEL: 'info' },
    stdio: ['ignore', 'pipe', 'pipe']
  })
  t.after(() => { if (child.exitCode == null && child.signalCode == null) child.kill('SIGKILL') })
  let out = ''
  child.stdout?.on('data', (chunk: Buffer) => { out += chunk.toString() })
  child.stderr?.on('data', (chunk: Buffer) => { out += chunk.toString() })
  const started = await waitFor(() => {
    if (child.exitCode != null) throw new Error(`node in ${ns} exited with ${child.exitCode}: ${out}`)
    const line = out.split('\n').find(l => l.includes('meshnode is listening'))
    return line == null ? undefined : JSON.parse(line) as { port: number, nodeID: string }
  }, { timeoutMs: 30_000, what: `the node in ${ns} to listen` })
  const cli = async (...args: string[]): Promise<string> => {
    const { stdout } = await run('ip', ['netns', 'exec', ns, process.execPath, CLI, ...args, '--port', String(started.port), '--data-dir', dataDir],
      { env: { ...process.env, MESHNODE_API_KEY: '' } })
    return stdout
  }
  const api = async (method: string, path: string, body?: unknown): Promise<unknown> => {
    const { stdout } = await run('ip', ['netns', 'exec', ns, process.execPath, '-e', FETCH_SCRIPT,
      `http://127.0.0.1:${started.port}${path}`, method, body === undefined ? '' : JSON.stringify(body)])
    return JSON.parse(stdout)
  }
  return { ns, dataDir, port: started.port, nodeID: started.nodeID, child, output: () => out, cli, api }
}

async function lanPeers (node: LanNode): Promise<Array<{ nodeID: string, type: string }>> {
  return (await node.api('GET', '/v1/app/peers') as { peers: Array<{ nodeID: string, type: string }> }).peers
}

const skipReason = whyNetnsUnavailable()

test('LAN cluster: mDNS discovery in network namespaces; a wrong passcode is no cluster peer; off takes effect at once',
  { timeout: 120_000, skip: skipReason == null ? false : `skipped: ${skipReason}` }, async (t) => {
    const namespaces = await buildLan(t, 3)
    const [alpha1, alpha2, beta] = await Promise.all(namespaces.map(async ns => await startLanNode(t, ns)))
    await Promise.all(([[alpha1, 'correct horse'], [alpha2, 'correct horse'], [beta, 'battery staple']] as const).map(async ([node, passcode]) => {
      await node.api('PATCH', '/v1/app/settings', { cluster_passcode: passcode, cluster_enabled: true })
    }))

    await waitFor(async () => {
      const [one, two] = await Promise.all([lanPeers(alpha1), lanPeers(alpha2)])
      return one.some(p => p.nodeID === alpha2.nodeID && p.type === 'lan') && two.some(p => p.nodeID === alpha1.nodeID && p.type === 'lan')
    }, { timeoutMs: 60_000, intervalMs: 300, what: 'the two nodes with the same passcode to be LAN peers' })
    assert.deepEqual((await alpha1.api('GET', '/v1/app')).peers, { lan: 1, wan: 0 })
    // The CLI shows the same table.
    const listed = JSON.parse(await alpha1.cli('peers', '--json')) as { peers: Array<{ nodeID: string, type: string }> }
    assert.deepEqual(listed.peers.map(p => [p.nodeID, p.type]), [[alpha2.nodeID, 'lan']])
    assert.match(await alpha1.cli('peers'), new RegExp(`${alpha2.nodeID.slice(0, 16)}.*lan.*online`))

    // The third node was found by mDNS and tried: its handshake failed both ways, so it is nobody's peer.
    await waitFor(() => /not admitted to the cluster|cluster handshake failed/.test(beta.output()), { timeoutMs: 30_000, what: 'the wrong-passcode node to be refused' })
    assert.deepEqual(await lanPeers(beta), [])
    assert.ok(!(await lanPeers(alpha1)).some(p => p.nodeID === beta.nodeID))
    assert.ok(!(await lanPeers(alpha2)).some(p => p.nodeID === beta.nodeID))
    assert.ok(!/correct horse|battery staple/.test(alpha1.output() + alpha2.output() + beta.output()), 'no passcode in any log')

    // Off on one node: its peer loses it at once (no restart).
    await alpha2.api('PATCH', '/v1/app/settings', { cluster_enabled: false })
    await waitFor(async () => (await lanPeers(alpha1)).length === 0, { timeoutMs: 20_000, intervalMs: 300, what: 'the peer to drop the node that left' })
    assert.deepEqual(await lanPeers(alpha2), [])
  })
