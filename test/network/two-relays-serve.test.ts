// Two relays given at run time to `meshnode serve` processes started with their defaults, as a user would: every node
// finds every other, through either relay, and still when one of the relays is gone; also when the two relays share
// one key (a relay's data dir copied), which makes them one peer to libp2p.
import assert from 'node:assert/strict'
import { copyFile, mkdir } from 'node:fs/promises'
import { join } from 'node:path'
import { test, type TestContext } from 'node:test'
import { NODE_KEY_FILE } from '../../src/identity/identity.ts'
import { Api, spawnNodeProcess, tempDir, waitFor } from '../support/node.ts'
import { startRelayProcess } from '../support/relay-process.ts'



interface ServeProcess {
  api: Api
  nodeID: string
}

/** `meshnode serve` with every default but its data dir and port, WAN switched on with `relayUrls` through the API. */
async function startServe (t: TestContext, relayUrls: string[]): Promise<ServeProcess> {
  const node = await spawnNodeProcess(t, ['--data-dir', await tempDir(t)])
  const api = new Api(node.url)
  const app = await api.get('/v1/app')
  assert.equal(app.status, 200)
  const res = await api.patch('/v1/app/settings', { wan_enabled: true, wan_relay_url: relayUrls.join(',') })
  assert.equal(res.status, 200, JSON.stringify(res.body))
  return { api, nodeID: app.body.node.nodeID }
}

/** Every node lists every other one in `GET /v1/app/peers`. */
async function waitAllSeeAll (nodes: ServeProcess[], what: string): Promise<void> {
  await waitFor(async () => {
    for (const node of nodes) {
      const { body } = await node.api.get('/v1/app/peers')
      const listed = new Set((body.peers as Array<{ nodeID: string }>).map(peer => peer.nodeID))
      if (!nodes.every(other => other === node || listed.has(other.nodeID))) return false
    }
    return true
  }, { timeoutMs: 120_000, intervalMs: 250, what })
}

test('three `meshnode serve` nodes given two relays at run time see each other; with one relay stopped, a newcomer still finds them', { timeout: 300_000 }, async (t) => {
  const relays = await Promise.all([0, 1].map(async (i) => await startRelayProcess(t, join(await tempDir(t), `relay-${i}`))))
  const urls = relays.map(relay => relay.url)
  const nodes = await Promise.all([0, 1, 2].map(async () => await startServe(t, urls)))
  await waitAllSeeAll(nodes, 'every node to list the other two')

  assert.equal((await relays[0].stop()).code, 0)
  const newcomer = await startServe(t, urls)
  await waitAllSeeAll([...nodes, newcomer], 'every node, and one started after the first relay stopped, to list the others')
})

test('two relays that share one key (a copied data dir): three `meshnode serve` nodes given both see each other, in whichever order they list them', { timeout: 300_000 }, async (t) => {
  const [first, second] = [join(await tempDir(t), 'relay'), join(await tempDir(t), 'relay-copy')]
  const original = await startRelayProcess(t, first)
  await mkdir(second, { mode: 0o700 })
  await copyFile(join(first, NODE_KEY_FILE), join(second, NODE_KEY_FILE))
  const copy = await startRelayProcess(t, second)
  assert.equal(copy.peerId, original.peerId, 'one key, two relays')
  // Each node tends to reach first the relay it lists first: a node that asked whichever relay libp2p took for the
  // peer id registered at one directory only, and nodes that reached the other never saw it.
  const orders = [[original.url, copy.url], [copy.url, original.url], [original.url, copy.url]]
  const nodes = await Promise.all(orders.map(async (urls) => await startServe(t, urls)))
  await waitAllSeeAll(nodes, 'every node to list the other two')
})
