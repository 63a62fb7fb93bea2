import type { PeerId, Stream } from '@libp2p/interface'
import type { Libp2p } from 'libp2p'
import { z } from 'zod'
import { NodeID, type NodeIdentity } from '../identity/index.ts'
import { ProtocolError, SignedEnvelope, openEnvelope, requestOnStream, serveRequest, signEnvelope } from '../wire/index.ts'
import { openStream } from './peer-ids.ts'

// What a node offers its peers, signed by its node key and fetched by each peer when it connects and at every
// heartbeat. Signed although it comes over an authenticated connection: a record can then be shown to a third party
// (or relayed) and still prove who made it, and a forged one is refused the same way whatever path it took.
export const CAPABILITIES_PROTOCOL = '/meshnode/capabilities/1.0.0'   // new version on any wire change
export const MAX_CAPABILITIES_REQUEST_BYTES = 1024
/** A record with 256 model ids, 32 PTN certificates and an agent profile, with room to spare. */
export const MAX_CAPABILITIES_RECORD_BYTES = 256 * 1024
export const CAPABILITIES_READ_TIMEOUT_MS = 10_000
export const MAX_ADVERTISED_MODELS = 256
export const MAX_ADVERTISED_CERTIFICATES = 32
export const MAX_DEMAND_ENTRIES = 64
export const MAX_INBOUND_CAPABILITIES_STREAMS = 4

export const ModelIDString = z.string().min(1).max(512)

export const CapabilityRecord = z.object({
  nodeID: NodeID,
  name: z.string().min(1).max(128),
  /** The model this node serves now, and every model it has on disk (which it could load). */
  models: z.object({
    loaded: ModelIDString.nullable(),
    downloaded: z.array(ModelIDString).max(MAX_ADVERTISED_MODELS)
  }),
  capacity: z.object({
    /** Generations the loaded model runs at once. */
    slots: z.number().int().min(0).max(1024),
    busySlots: z.number().int().min(0).max(1024),
    /** Requests waiting for a slot. */
    queued: z.number().int().min(0).max(1_000_000),
    /** Slots kept for members of this node's PTNs (`org_capacity_reservation`). */
    reservedSlots: z.number().int().min(0).max(1024)
  }),
  /** What this node charges per 1000 generated tokens, in micro-credits. */
  pricePer1kTokensMicro: z.number().int().min(0).max(Number.MAX_SAFE_INTEGER),
  hardware: z.object({
    cpu: z.string().max(256),
    cores: z.number().int().min(0).max(100_000),
    memoryGB: z.number().min(0).max(1_000_000),
    gpu: z.string().max(256).nullable()
  }),
  /** PTN membership certificates (`certData`), verified by whoever reads them. */
  ptnCertificates: z.array(z.string().min(1).max(8192)).max(MAX_ADVERTISED_CERTIFICATES),
  /** The node's agent profile, if it has one (CONTRACT §9); checked by the agent domain. */
  agent: z.record(z.string(), z.json()).nullable(),
  /** Models this node was asked for and could not serve, with how often (issue 4, demand-driven models). */
  demand: z.array(z.object({ modelID: ModelIDString, requests: z.number().int().min(1).max(Number.MAX_SAFE_INTEGER) })).max(MAX_DEMAND_ENTRIES),
  /** Unix ms when the node signed it; a peer never accepts a record older than one it already has. */
  timestamp: z.number().int().nonnegative()
})
export type CapabilityRecord = z.infer<typeof CapabilityRecord>

const CapabilitiesRequest = z.object({ type: z.literal('get') })

export function signCapabilities (identity: NodeIdentity, record: CapabilityRecord): SignedEnvelope<CapabilityRecord> {
  return signEnvelope(identity, record, { domain: CAPABILITIES_PROTOCOL })
}

/** Checks an envelope: signed by `nodeID`'s key for this protocol, naming `nodeID`, of the right shape. */
export function openCapabilities (envelope: unknown, nodeID: string): CapabilityRecord {
  const record = openEnvelope(envelope, CapabilityRecord, { domain: CAPABILITIES_PROTOCOL, expectedSigner: nodeID })
  if (record.nodeID !== nodeID) throw new ProtocolError(`Capability record names ${record.nodeID} but is signed by ${nodeID}`, 'invalid')
  return record
}

/** Answers one `get` with this node's current signed record. */
export function createCapabilitiesHandler (current: () => SignedEnvelope<CapabilityRecord>): (stream: Stream) => Promise<void> {
  return async (stream) => {
    await serveRequest(stream, CapabilitiesRequest, () => current(), { maxRequestBytes: MAX_CAPABILITIES_REQUEST_BYTES, maxAnswerBytes: MAX_CAPABILITIES_RECORD_BYTES, timeoutMs: CAPABILITIES_READ_TIMEOUT_MS })
  }
}

/** Fetches and verifies a peer's record. Throws `ProtocolError` for a malformed, oversized or forged one. */
export async function fetchCapabilities (host: Libp2p, peer: PeerId, nodeID: string, options: { signal?: AbortSignal } = {}): Promise<CapabilityRecord> {
  const stream = await openStream(host, peer, CAPABILITIES_PROTOCOL, options)
  const envelope = await requestOnStream(stream, { type: 'get' }, SignedEnvelope, {
    signal: options.signal, timeoutMs: CAPABILITIES_READ_TIMEOUT_MS, maxRequestBytes: MAX_CAPABILITIES_REQUEST_BYTES, maxAnswerBytes: MAX_CAPABILITIES_RECORD_BYTES
  })
  return openCapabilities(envelope, nodeID)
}
