import { createHash } from 'node:crypto'
import { noise } from '@chainsafe/libp2p-noise'
import { autoNATv2 } from '@libp2p/autonat-v2'
import { circuitRelayTransport } from '@libp2p/circuit-relay-v2'
import { gossipsub, type GossipSub } from '@libp2p/gossipsub'
import type { TopicScoreParams } from '@libp2p/gossipsub/score'
import { identify, type Identify } from '@libp2p/identify'
import type { MultiaddrConnection, PeerId } from '@libp2p/interface'
import { mdns } from '@libp2p/mdns'
import { ping, type Ping } from '@libp2p/ping'
import { RateLimiter, tryGetNetConfig } from '@libp2p/utils'
import { webSockets } from '@libp2p/websockets'
import { createLibp2p, type Libp2p } from 'libp2p'
import { pino, type Logger } from 'pino'
import type { NodeIdentity } from '../../identity/index.ts'
import { ADVERTS_TOPIC } from '../adverts/topic.ts'
import { warnInactivePatches, type PatchReport } from '../../system/patch-report.ts'
import { HolePunch } from './hole-punch.ts'
import { lanPresence, type LanPresence, type LanPresenceOptions } from '../lan/lan-presence.ts'
import { autonatV2Patches } from './patches/libp2p-autonat-v2.ts'
import { cryptoPatches } from './patches/libp2p-crypto.ts'
import { dcutrPatches } from './patches/libp2p-dcutr.ts'
import { yamux, yamuxPatches } from './patches/libp2p-yamux.ts'
import { DEFAULT_LISTEN, privateKeyFromIdentity } from './peer-ids.ts'
import { ReachabilityMonitor } from './reachability.ts'
import { isCircuit } from './relay-address.ts'

// The helpers that need no transports live in peer-ids.ts; they are re-exported here for callers that build hosts.
export { DEFAULT_LISTEN, privateKeyFromIdentity, peerIdFromIdentity, peerIdToNodeID, nodeIDToPeerId, openStream, handleProtocol } from './peer-ids.ts'

// Listening on this makes the circuit relay transport take a reservation on a relay we connect to (WanClient
// dials the configured ones), so peers can reach us at <relay>/p2p-circuit/p2p/<us> when they cannot dial us. Listed
// twice: reservations on two relays, so that losing one leaves us reachable through the other.
const RELAY_RESERVATION_LISTEN = ['/p2p-circuit', '/p2p-circuit']

export interface PeerHostServices extends Record<string, unknown> {
  identify: Identify
  ping: Ping
  /** LAN listener and mDNS, switched on and off at run time (PeerNetwork does, for `cluster_enabled`). */
  lanPresence: LanPresence
  /** Gossip of the nodes' adverts (`advert-gossip.ts`). */
  pubsub: GossipSub
  /** What AutoNAT learned of this node's reachability (`reachability.ts`). */
  reachability: ReachabilityMonitor
}

/** The node's libp2p host. The composition root owns it: it is started by `createPeerHost` and stopped with `stop()`. */
export type PeerHost = Libp2p<PeerHostServices>

export interface PeerHostOptions {
  /** Multiaddrs to listen on; [] for a node reachable only through its relay. @default DEFAULT_LISTEN */
  listen?: string[]
  /** When set (WAN enabled), the node takes a reservation on the relay it connects to. @default null */
  relayUrl?: string | null
  /**
   * Take a reservation on any relay the node connects to, whether or not `relayUrl` is set: for a node whose WAN
   * setting is switched at run time (the reservation listener cannot be added to a running host cleanly).
   * @default false
   */
  relayReservations?: boolean
  /** Tunables of the LAN presence service (mDNS). */
  lan?: LanPresenceOptions
  /** Refuses connections with these peers both ways (a peer banned for misbehaving). @default none */
  denyPeer?: (peer: PeerId) => boolean
  /** LAN discovery by mDNS (the `cluster_enabled` setting). @default false */
  mdns?: boolean
  /**
   * How often libp2p's connection monitor pings every connection: each connection's `rtt` (the peers' latency), and a
   * connection whose ping fails is closed, which is how a dead peer leaves the table. @default CONNECTION_PING_INTERVAL_MS
   */
  pingIntervalMs?: number
  /** Connections held at most (libp2p's connection manager: inbound ones beyond are refused, the least valued pruned). @default 50 */
  maxConnections?: number
  /** New direct inbound connections per second from one IP address (libp2p's default: 5; see `inboundConnectionLimit`). @default 5 */
  inboundConnectionsPerSecond?: number
  log?: Logger
}

/**
 * How often libp2p's connection monitor pings each connection, by default (libp2p's own default is 10 s). Idle, these
 * pings are nearly every stream a node opens: both ends ping every connection, each ping a new yamux stream with its
 * protocol negotiation, so the interval sets most of an idle node's traffic and CPU (bench/README.md). A closed socket
 * ends a connection at once; the ping only finds a peer that vanished without closing (a crash of its machine, a
 * dropped route), and 30 s (+ the 10 s timeout) is soon enough for that.
 */
export const CONNECTION_PING_INTERVAL_MS = 30_000

/**
 * Every patch a host makes to its dependencies' private internals (patches/, one module per dependency), each saying
 * whether it took. `createPeerHost` warns of each one that did not, once per host; the relay warns of its own.
 */
export async function hostPatches (): Promise<PatchReport[]> {
  return [...yamuxPatches(), ...dcutrPatches(), ...autonatV2Patches(), ...await cryptoPatches()]
}

/**
 * How gossipsub scores a peer on the advert topic: by the adverts it sent that the topic validator rejected (forged,
 * malformed, over a limit), and by nothing else. Each costs 100 points squared by how many it sent lately, the count
 * decaying by 1% a second: one puts the peer below gossipsub's graylist threshold (-80: everything it sends is
 * dropped unread) for about 10 seconds, and out of the mesh (a negative score) for about 4 minutes; a peer that keeps
 * sending them has one read every 10 seconds or so. What rewards or penalises delivery rates stays off: adverts are
 * rare (a node's every 20 minutes), so a quiet mesh peer is no failing one.
 */
const ADVERTS_TOPIC_SCORE: TopicScoreParams = {
  topicWeight: 1,
  timeInMeshWeight: 0,
  timeInMeshQuantum: 1_000,
  timeInMeshCap: 1,
  firstMessageDeliveriesWeight: 0,
  firstMessageDeliveriesDecay: 0.5,
  firstMessageDeliveriesCap: 1,
  meshMessageDeliveriesWeight: 0,
  meshMessageDeliveriesDecay: 0.5,
  meshMessageDeliveriesCap: 1,
  meshMessageDeliveriesThreshold: 1,
  meshMessageDeliveriesWindow: 10,
  meshMessageDeliveriesActivation: 5_000,
  meshFailurePenaltyWeight: 0,
  meshFailurePenaltyDecay: 0.5,
  invalidMessageDeliveriesWeight: -100,
  invalidMessageDeliveriesDecay: 0.99
}

/** A gossip message's id: the SHA-256 of its data. */
function contentId (message: { data: Uint8Array }): Uint8Array {
  return createHash('sha256').update(message.data).digest()
}

/** Builds and starts the libp2p host whose peer id is the node key. */
export async function createPeerHost (identity: NodeIdentity, options: PeerHostOptions = {}): Promise<PeerHost> {
  const log = options.log ?? pino({ level: 'silent' })
  warnInactivePatches(log, await hostPatches())
  const listen = [...(options.listen ?? DEFAULT_LISTEN)]
  if (options.relayUrl != null || options.relayReservations === true) listen.push(...RELAY_RESERVATION_LISTEN)
  const reachability = new ReachabilityMonitor({ log: log.child({ part: 'reachability' }) })
  const holePunch = await HolePunch.create({ log: log.child({ part: 'hole-punch' }), onPublicIp: (ip) => { reachability.publicIp(ip) } })
  const host = await createLibp2p<PeerHostServices>({
    privateKey: privateKeyFromIdentity(identity),
    addresses: { listen },
    // TCP whose hole-punching dials leave from the punch port (hole-punch.ts): behind NAT, a relayed connection is
    // upgraded to a direct one by DCUtR when both NATs let the punch through, and stays relayed when they do not.
    transports: [holePunch.tcp(), webSockets(), circuitRelayTransport()],
    connectionEncrypters: [noise()],
    streamMuxers: [yamux()],
    peerDiscovery: options.mdns === true ? [mdns()] : [],
    // The per-address limit is ours (inboundConnectionLimit), so that it spares relayed connections; libp2p's own is off.
    connectionManager: { maxConnections: options.maxConnections ?? 50, inboundConnectionThreshold: Number.POSITIVE_INFINITY },
    // A ping slower than this fails and closes the connection: generous, so that a machine under load keeps its peers.
    connectionMonitor: { pingInterval: options.pingIntervalMs ?? CONNECTION_PING_INTERVAL_MS, pingTimeout: { minTimeout: 10_000 } },
    connectionGater: {
      denyInboundConnection: inboundConnectionLimit(options.inboundConnectionsPerSecond ?? 5),
      ...(options.denyPeer == null
        ? {}
        : { denyDialPeer: options.denyPeer, denyInboundEncryptedConnection: options.denyPeer, denyOutboundEncryptedConnection: options.denyPeer })
    },
    // The connection monitor pings on the ping protocol too, both ways: room for its pings and our one first ping at
    // once, and for pings still closing on a busy machine, or a ping is refused and the monitor closes the connection.
    services: {
      identify: identify(),
      ping: ping({ maxOutboundStreams: 4, maxInboundStreams: 8 }),
      lanPresence: lanPresence(options.lan),
      dcutr: holePunch.dcutr(),
      holePunch: holePunch.service(),
      // AutoNAT v2: this node answers peers' dial-back requests and asks its own (reachability.ts)
      autonat: reachability.autonat(autoNATv2),
      reachability: () => reachability,
      // Adverts are signed by their node inside the message, so gossipsub signs nothing (StrictNoSign: no second
      // signature to make and check on every message at every node, where signature checks are what a large network
      // spends most of its start on; bench/README.md). The message id is its content's hash, so one advert heard from several peers is taken once.
      // Peers' addresses come from the adverts, not from peer exchange. Peers on loopback are not penalised for sharing
      // an address: gossipsub's IP colocation score shuns every peer of an address once more than 10 share it, which
      // would cut the gossip between nodes run side by side. A peer that sends adverts the validator rejects loses
      // score (ADVERTS_TOPIC_SCORE).
      pubsub: gossipsub({
        allowPublishToZeroTopicPeers: true,
        globalSignaturePolicy: 'StrictNoSign',
        doPX: false,
        runOnLimitedConnection: true,
        maxInboundDataLength: 1024 * 1024,
        msgIdFn: contentId,
        scoreParams: { IPColocationFactorWhitelist: new Set(['127.0.0.1', '::1']), topics: { [ADVERTS_TOPIC]: ADVERTS_TOPIC_SCORE } }
      })
    }
  })
  log.info({ peerId: host.peerId.toString(), addrs: host.getMultiaddrs().map(String) }, 'libp2p host started')
  return host
}

/**
 * libp2p's limit on new inbound connections per second from one IP address, for direct connections only: a connection
 * gater that refuses the ones over `perSecond`. libp2p's own limit (its connection manager's
 * `inboundConnectionThreshold`) counts a relayed connection against the address it arrives from, the relay's, so every
 * peer that reaches this node through one relay shared one budget of 5 a second. When a relay went down and its nodes
 * came back through the other one all at once, this node refused most of them, and their first requests failed on a
 * handshake that never finished (test/network/relays.test.ts, about 1 run in 7). A relayed connection cannot show the
 * dialer's own address, so relayed connections have no rate of their own: libp2p's caps on pending inbound connections
 * (10) and on open ones (`maxConnections`) bound them, and the relay limits how fast each address connects to it.
 */
export function inboundConnectionLimit (perSecond: number): (connection: MultiaddrConnection) => boolean {
  const limiter = new RateLimiter({ points: perSecond, duration: 1 })
  return (connection) => {
    const address = connection.remoteAddr
    const host = isCircuit(address) ? undefined : tryGetNetConfig(address)?.host // as libp2p reads it
    if (host == null) return false
    try {
      limiter.consume(host, 1)
      return false
    } catch {
      return true
    }
  }
}
