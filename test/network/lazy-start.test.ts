import { test } from 'node:test'
import assert from 'node:assert/strict'
import { spawnSync } from 'node:child_process'
import { readFile } from 'node:fs/promises'
import { join } from 'node:path'
import { startTestNode, tempDir, waitFor } from '../support/node.ts'
import { startTestRelay, waitForPeers, wanSettings } from '../support/network.ts'

test('with WAN and the LAN cluster off the node does not listen for peers; switching WAN on starts the network at once', async (t) => {
  const relay = await startTestRelay(t)
  const [a, b] = await Promise.all([startTestNode(t), startTestNode(t)])
  assert.deepEqual(a.node.network.addresses(), [], 'no peer listener while networking is off')
  assert.deepEqual((await a.api.get('/v1/app/peers')).body.peers, [])
  await assert.rejects(a.node.network.open(b.nodeID, '/meshnode/test/1.0.0'), /not started/)

  for (const node of [a, b]) assert.equal((await node.api.patch('/v1/app/settings', wanSettings(relay))).status, 200)
  await waitFor(() => a.node.network.addresses().length > 0, { what: 'the peer network to start' })
  await Promise.all([waitForPeers(a, [b.nodeID]), waitForPeers(b, [a.nodeID])])
  assert.deepEqual((await a.api.get('/v1/app/peers')).body.peers.map((p: { nodeID: string }) => p.nodeID), [b.nodeID])
})

test('importing the node loads none of libp2p\'s transports, services or stream helpers: a node with networking off never pays for them', async (t) => {
  // A fresh process records every module it loads (ES modules and CommonJS alike) while it imports the composition
  // root, and writes the list to a file when it exits (a file: a pipe written at exit may be cut short)
  const out = join(await tempDir(t), 'loaded.json')
  const hook = 'import { registerHooks } from \'node:module\'; import { writeFileSync } from \'node:fs\'; const seen = []; ' +
    'registerHooks({ load (url, context, next) { seen.push(url); return next(url, context) } }); ' +
    `process.on('exit', () => { writeFileSync(${JSON.stringify(out)}, JSON.stringify(seen)) })`
  const root = new URL('../../src/node.ts', import.meta.url).href
  const child = spawnSync(process.execPath, ['--import', `data:text/javascript,${encodeURIComponent(hook)}`, '--input-type=module',
    '-e', `await import(${JSON.stringify(root)})`], { encoding: 'utf8', timeout: 120_000 })
  assert.equal(child.status, 0, child.stderr)
  const loaded = JSON.parse(await readFile(out, 'utf8')) as string[]
  assert.ok(loaded.some((url) => url.endsWith('/src/network/peer-network.ts')), 'the network layer itself is imported')
  const stack = loaded.filter((url) => /\/node_modules\/(libp2p|@libp2p\/(tcp|websockets|gossipsub|utils|identify|ping|mdns|dcutr|autonat-v2|circuit-relay-v2)|@chainsafe\/libp2p-(noise|yamux))\//.test(url))
  assert.deepEqual(stack, [], 'loaded only when the network starts (libp2p-node.ts)')
})
