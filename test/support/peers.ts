// Nodes that serve each other through a relay, as the peer, wallet and PTN tests start them, and what those tests
// read back from them: a /metrics value, and the moment every transfer is acknowledged.
import assert from 'node:assert/strict'
import type { TestContext } from 'node:test'
import type { NodeConfig } from '../../src/config.ts'
import { FAST_NETWORK, wanSettings, type TestRelay } from './network.ts'
import { startTestNode, waitFor, type Api, type TestNode } from './node.ts'

export interface PeerOptions {
  /** Loaded before the node joins the relay, so that its first record already names the model. */
  model?: { id: string, path: string }
  /** Settings patched with the relay's (electricity_cost, a PTN's...). */
  settings?: Record<string, unknown>
  /** Node config over FAST_NETWORK's timings (`network` replaces them whole). */
  config?: Partial<NodeConfig>
}

/** A node on `relay`'s WAN, serving `options.model` when given. Closed by t.after. */
export async function startPeer (t: TestContext, relay: TestRelay, options: PeerOptions = {}): Promise<TestNode> {
  const node = await startTestNode(t, { network: FAST_NETWORK, ...options.config })
  if (options.model != null) await node.node.engine.load(options.model.id, options.model.path)
  const res = await node.api.patch('/v1/app/settings', { ...options.settings, ...wanSettings(relay) })
  assert.equal(res.status, 200, JSON.stringify(res.body))
  return node
}

/** A counter or gauge from GET /metrics: the sum of its series (every label set); 0 while it has none. */
export async function metric (api: Api, name: string): Promise<number> {
  const res = await api.get('/metrics')
  assert.equal(res.status, 200)
  return String(res.body).split('\n')
    .filter((line) => line.startsWith(`${name} `) || line.startsWith(`${name}{`))
    .reduce((sum, line) => sum + Number(line.split(' ').at(-1)), 0)
}

/** Waits until none of `nodes` has a transfer its payee has not acknowledged. */
export async function settled (nodes: TestNode[]): Promise<void> {
  await waitFor(async () => {
    const pending = await Promise.all(nodes.map(async (node) => (await node.api.get('/v1/app/wallet')).body.pendingTransfers as number))
    return pending.every((count) => count === 0)
  }, { what: 'every transfer acknowledged' })
}
