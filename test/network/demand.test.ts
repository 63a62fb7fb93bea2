import { test } from 'node:test'
import assert from 'node:assert/strict'
import { join } from 'node:path'
import { startTestNode, tempDir, waitFor } from '../support/node.ts'
import { startFakeHub } from '../support/fake-hub.ts'
import { FAST_NETWORK, startTestRelay, waitForPeers, wanSettings } from '../support/network.ts'
import { writeTinyGguf } from '../support/tiny-gguf.ts'

const MODEL = 'hf.co/meshnode-test/tiny/tiny.gguf'
const hello = [{ role: 'user' as const, content: 'hi' }]

test('demand-driven models: a node with auto_manage_models fetches and serves the model its peer keeps asking for', async (t) => {
  const hub = await startFakeHub()
  t.after(() => hub.close())
  await hub.addFile('meshnode-test/tiny', 'tiny.gguf', (await writeTinyGguf(join(await tempDir(t, 'meshnode-hub-files-'), 'tiny.gguf'), { seed: 7 })).path)
  const relay = await startTestRelay(t)
  const network = { ...FAST_NETWORK, demand: { intervalMs: 200, minRequests: 3 } }
  const provider = await startTestNode(t, { network, hfEndpoint: hub.url })
  const asker = await startTestNode(t, { network })
  for (const node of [provider, asker]) assert.equal((await node.api.patch('/v1/app/settings', wanSettings(relay))).status, 200)
  await Promise.all([waitForPeers(provider, [asker.nodeID]), waitForPeers(asker, [provider.nodeID])])

  // Nobody has the model: each ask is a 404, and counts as demand the asker advertises.
  for (let i = 0; i < 3; i++) {
    const res = await asker.api.post('/v1/chat/completions', { model: MODEL, messages: hello, max_tokens: 2 })
    assert.equal(res.status, 404)
  }
  assert.deepEqual(asker.node.demand.list(), [{ modelID: MODEL, requests: 3 }])
  await waitFor(() => provider.node.network.peer(asker.nodeID)?.record.demand.some(d => d.modelID === MODEL && d.requests === 3), { what: 'the provider to see the demand' })
  // With auto_manage_models off, demand alone changes nothing.
  assert.equal((await provider.api.get('/v1/app')).body.model, null)

  assert.equal((await provider.api.patch('/v1/app/settings', { auto_manage_models: true })).status, 200)
  const snapshot = await waitFor(async () => {
    const app = (await provider.api.get('/v1/app')).body
    return app.model?.status === 'loaded' ? app : undefined
  }, { timeoutMs: 30_000, what: 'the provider to download and load the demanded model' })
  assert.equal(snapshot.model.modelID, MODEL)
  assert.equal(snapshot.models.find((m: { modelID: string }) => m.modelID === MODEL)?.status, 'loaded')

  await waitFor(() => asker.node.network.peer(provider.nodeID)?.record.models.loaded === MODEL, { what: 'the asker to see the model served' })
  const res = await asker.api.post('/v1/chat/completions', { model: MODEL, messages: hello, max_tokens: 2 })
  assert.equal(res.status, 200, JSON.stringify(res.body))
  assert.equal(res.headers.get('x-served-by'), `peer:${provider.nodeID}`)
})
