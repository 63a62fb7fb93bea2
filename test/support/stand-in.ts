// A stand-in peer for protocol tests: a raw libp2p host with a node key of its own, answering record fetches like a
// node does (so that a real node admits it to its peer table), and otherwise speaking only what a test makes it speak.
import type { TestContext } from 'node:test'
import { multiaddr, type Multiaddr } from '@multiformats/multiaddr'
import { pino } from 'pino'
import { generateSeed, identityFromSeed, type NodeIdentity } from '../../src/identity/index.ts'
import { CAPABILITIES_PROTOCOL, createCapabilitiesHandler, signCapabilities, type CapabilityRecord } from '../../src/network/peers/capabilities.ts'
import { createPeerHost, handleProtocol, peerIdToNodeID, type PeerHost } from '../../src/network/host/libp2p-node.ts'
import type { TestNode } from './node.ts'

const log = pino({ level: 'silent' })

export interface StandIn {
  identity: NodeIdentity
  host: PeerHost
}

/** `node`'s own TCP addresses (no WebSocket, no relay circuit): what a stand-in on this machine dials to reach it directly. */
export function directAddrs (node: TestNode): Multiaddr[] {
  return node.node.network.addresses().filter(a => a.includes('/tcp/') && !a.includes('/ws') && !a.includes('p2p-circuit')).map(a => multiaddr(a))
}

/** A raw host on loopback TCP, stopped in t.after. */
export async function standInHost (t: TestContext): Promise<StandIn> {
  const identity = identityFromSeed(generateSeed())
  const host = await createPeerHost(identity, { listen: ['/ip4/127.0.0.1/tcp/0'], log })
  t.after(() => host.stop())
  return { identity, host }
}

/** A record as a node would advertise it, with `overrides`. */
export function standInRecord (identity: NodeIdentity, overrides: Partial<CapabilityRecord> = {}): CapabilityRecord {
  return {
    nodeID: identity.nodeID,
    version: 1,
    name: 'stand-in',
    models: { loaded: 'some-model', downloaded: ['some-model'] },
    capacity: { slots: 1, busySlots: 0, queued: 0, reservedSlots: 0 },
    pricePer1kTokensMicro: 0,
    hardware: { cpu: 'x', cores: 1, memoryGB: 1, gpu: null },
    ptnCertificates: [],
    agent: null,
    demand: [],
    timestamp: Date.now(),
    ...overrides
  }
}

/** Makes `standIn` answer record fetches with `record()` (signed at each fetch); pushes from the node are taken. */
export async function serveRecord (standIn: StandIn, record: () => CapabilityRecord): Promise<void> {
  const handler = createCapabilitiesHandler({ current: () => signCapabilities(standIn.identity, record()), received: () => undefined })
  await handleProtocol(standIn.host, CAPABILITIES_PROTOCOL, async (stream, connection) => {
    try {
      await handler(stream, { nodeID: peerIdToNodeID(connection.remotePeer) })
    } catch (err) {
      stream.abort(err instanceof Error ? err : new Error(String(err)))
    }
  }, { maxInboundStreams: 4 })
}
