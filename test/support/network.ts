// Peer network helpers for tests: a relay on loopback, nodes with WAN pointed at it, and waiting for peers.
import assert from 'node:assert/strict'
import type { TestContext } from 'node:test'
import { pino } from 'pino'
import type { NodeConfig } from '../../src/config.ts'
import { generateSeed } from '../../src/identity/index.ts'
import { startRelay, type RunningRelay } from '../../src/network/relay/relay.ts'
import { startTestNode, waitFor, type TestNode } from './node.ts'

/**
 * Pings, load pushes and WAN syncs fast enough for a test to see peers come and go within a second or two. The
 * record's safety timer keeps its default: a change a test waits for is pushed on its event.
 */
export const FAST_NETWORK: NonNullable<NodeConfig['network']> = {
  pingIntervalMs: 1_000,
  loadPushIntervalMs: 300,
  mdnsQueryIntervalMs: 500,
  wan: { syncIntervalMs: 1_000, fastSyncMs: 200, minBackoffMs: 100, maxBackoffMs: 1_000, dialTimeoutMs: 3_000, reservationTimeoutMs: 3_000 }
}

export interface TestRelay {
  /** The running relay; replaced by `restart`. */
  relay: RunningRelay
  /** `wan_relay_url` of this relay (stable across restarts). */
  url: string
  /** Stops the relay (its directory is lost) and starts it again on the same port with the same key. */
  restart (): Promise<void>
  stop (): Promise<void>
}

const relayLog = pino({ level: process.env.MESHNODE_TEST_LOG ?? 'silent' })

/** A `meshnode relay` on 127.0.0.1 with a free port, stopped in t.after. */
export async function startTestRelay (t: TestContext): Promise<TestRelay> {
  const seed = generateSeed()
  let relay = await startRelay({ port: 0, seed, log: relayLog })
  const url = relay.url
  const port = Number(new URL(url).port)
  let running = true
  const result: TestRelay = {
    get relay () { return relay },
    url,
    restart: async () => {
      await relay.stop()
      relay = await startRelay({ port, seed, log: relayLog })
      running = true
    },
    stop: async () => {
      if (!running) return
      running = false
      await relay.stop()
    }
  }
  t.after(() => result.stop())
  return result
}

/** The settings patch that puts a node on `relay`'s WAN. */
export function wanSettings (relay: TestRelay): { wan_enabled: true, wan_relay_url: string } {
  return { wan_enabled: true, wan_relay_url: relay.url }
}

/** A node (fast network timings) with WAN switched on through the settings API, as a user would. */
export async function startWanNode (t: TestContext, relay: TestRelay, overrides: Partial<NodeConfig> = {}): Promise<TestNode> {
  const node = await startTestNode(t, { network: FAST_NETWORK, ...overrides })
  const res = await node.api.patch('/v1/app/settings', wanSettings(relay))
  assert.equal(res.status, 200, JSON.stringify(res.body))
  return node
}

/** Waits until `node` has every one of `nodeIDs` in its peer table (status online). */
export async function waitForPeers (node: TestNode, nodeIDs: string[], options: { timeoutMs?: number } = {}): Promise<void> {
  await waitFor(() => nodeIDs.every(id => node.node.network.peer(id)?.status === 'online'), {
    timeoutMs: options.timeoutMs ?? 20_000,
    what: `${node.nodeID.slice(0, 8)} to see peers ${nodeIDs.map(id => id.slice(0, 8)).join(', ')}`
  })
}
