import type { Stream } from '@libp2p/interface'
import { z } from 'zod'
import { NodeID, type NodeIdentity } from '../../identity/index.ts'
import { JsonObject, ProtocolError, SignedEnvelope, jsonSize, parseWith, readRequest, requestOnStream, writeMessage, signEnvelope, verifyCanonical } from '../../wire/index.ts'

// What a node offers its peers, signed by its node key. A peer fetches it once when it connects (`get`); after that
// the node pushes it to its peers whenever it changes (`push`), with a version number one higher: nobody re-fetches a
// record that has not changed. Signed although it comes over an authenticated connection: a record can then be shown
// to a third party (or relayed) and still prove who made it, and a forged one is refused the same way whatever path
// it took.
export const CAPABILITIES_PROTOCOL = '/meshnode/capabilities/2.0.0'   // new version on any wire change
export const MAX_CAPABILITIES_REQUEST_BYTES = 1024
/** A record with 256 model ids, 32 PTN certificates and an agent profile, with room to spare. */
export const MAX_CAPABILITIES_RECORD_BYTES = 256 * 1024
/**
 * JSON values (objects, arrays, strings, numbers...) in one record at most; a full record (512 model ids, 32
 * certificates, 64 demand entries, an agent profile) holds about 900. Held parsed, a value costs some 64 bytes beside
 * its text, so without this bound a record of empty objects (`[{},{},…]`, three characters each) would take 20 times
 * its size in memory, and as long again to walk.
 */
export const MAX_CAPABILITIES_RECORD_VALUES = 4096
/**
 * The agent profile's JSON text at most. The agent domain's profile (`AgentAdvert`: a name of 128 characters and 32
 * capabilities of 64) is about 2.2 KiB; the rest is room for fields a later version adds, which peers before it ignore.
 */
export const MAX_AGENT_PROFILE_CHARS = 8 * 1024
export const CAPABILITIES_READ_TIMEOUT_MS = 10_000
export const MAX_ADVERTISED_MODELS = 256
/** What a peer accepts in one record; a node in more PTNs advertises the certificates it uses most. */
export const MAX_ADVERTISED_CERTIFICATES = 32
export const MAX_INBOUND_CAPABILITIES_STREAMS = 4
/** Models asked for and not served that one record lists, the most asked first (what the demand tracker keeps). */
export const MAX_ADVERTISED_DEMAND = 64

export const ModelIDString = z.string().min(1).max(512)

/** A JSON object whose text is at most MAX_AGENT_PROFILE_CHARS, measured before anything walks the whole of it. */
const AgentProfile = z.custom<unknown>((value) => jsonSize(value, { maxChars: MAX_AGENT_PROFILE_CHARS, maxValues: MAX_CAPABILITIES_RECORD_VALUES }) != null,
  { message: `more than ${MAX_AGENT_PROFILE_CHARS} characters of JSON` }).pipe(JsonObject)

export const CapabilityRecord = z.object({
  nodeID: NodeID,
  /** One higher at every change this node makes to its record; a peer keeps the highest it has seen. */
  version: z.number().int().nonnegative().max(Number.MAX_SAFE_INTEGER),
  name: z.string().min(1).max(128),
  /**
   * The model this node used most recently, every model it holds loaded (`allLoaded`, the first among them; absent
   * from nodes that hold one model at a time, whose `loaded` is all), and every model it has on disk (which it could
   * load).
   */
  models: z.object({
    loaded: ModelIDString.nullable(),
    allLoaded: z.array(ModelIDString).max(MAX_ADVERTISED_MODELS).optional(),
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
  /** The node's agent profile, if it has one; checked by the agent domain. Any JSON object of at most
   *  MAX_AGENT_PROFILE_CHARS, nested at most MAX_JSON_DEPTH. */
  agent: AgentProfile.nullable(),
  /** Models this node was asked for and could not serve, with how often (for demand-driven models). */
  demand: z.array(z.object({ modelID: ModelIDString, requests: z.number().int().min(1).max(Number.MAX_SAFE_INTEGER) })).max(MAX_ADVERTISED_DEMAND),
  /** Unix ms when the node signed it. */
  timestamp: z.number().int().nonnegative()
})
export type CapabilityRecord = z.infer<typeof CapabilityRecord>

const CapabilitiesRequest = z.discriminatedUnion('type', [
  /** Send me your current record. */
  z.object({ type: z.literal('get') }),
  /** My record changed: here it is. */
  z.object({ type: z.literal('push'), record: SignedEnvelope })
])
const PushAnswer = z.object({ type: z.literal('ok') })

export function signCapabilities (identity: NodeIdentity, record: CapabilityRecord): SignedEnvelope<CapabilityRecord> {
  return signEnvelope(identity, record, { domain: CAPABILITIES_PROTOCOL })
}

/**
 * Checks an envelope: signed by `nodeID`'s key for this protocol, naming `nodeID`, of the right shape. Unlike
 * `openEnvelope`, the size bounds and then the signature come before the schema: the schema walks every value of the
 * free JSON a record carries, so a forgery costs one signature check (over at most MAX_CAPABILITIES_RECORD_VALUES
 * values) and never that walk. A body canonical JSON cannot write (1e999 parses to Infinity) fails as a bad signature.
 */
export function openCapabilities (envelope: unknown, nodeID: string): CapabilityRecord {
  const { body, signer, signature } = parseWith(SignedEnvelope, envelope, 'Envelope')
  if (signer !== nodeID) throw new ProtocolError(`Envelope signed by ${signer}, expected ${nodeID}`, 'wrong_signer')
  if (jsonSize(body, { maxChars: MAX_CAPABILITIES_RECORD_BYTES, maxValues: MAX_CAPABILITIES_RECORD_VALUES }) == null) {
    throw new ProtocolError(`Capability record of ${nodeID} exceeds ${MAX_CAPABILITIES_RECORD_BYTES} characters or ${MAX_CAPABILITIES_RECORD_VALUES} values`, 'too_large')
  }
  if (!verifyCanonical(signer, { body, domain: CAPABILITIES_PROTOCOL }, Buffer.from(signature, 'base64'))) {
    throw new ProtocolError(`Envelope signature by ${signer} does not verify`, 'bad_signature')
  }
  const record = parseWith(CapabilityRecord, body, 'Envelope body')
  if (record.nodeID !== nodeID) throw new ProtocolError(`Capability record names ${record.nodeID} but is signed by ${nodeID}`, 'invalid')
  return record
}

export interface CapabilitiesHandlerDeps {
  /** This node's current signed record. */
  current: () => SignedEnvelope<CapabilityRecord>
  /** A peer pushed its record, verified (signed by that peer, naming it). */
  received: (nodeID: string, record: CapabilityRecord) => void
}

/**
 * Answers a `get` with this node's current record, and takes a `push` of the remote peer's. A record that does not
 * verify throws ProtocolError: the network resets the stream and bans the sender.
 */
export function createCapabilitiesHandler (deps: CapabilitiesHandlerDeps): (stream: Stream, peer: { nodeID: string }) => Promise<void> {
  return async (stream, peer) => {
    const { frames, request } = await readRequest(stream, CapabilitiesRequest, { maxRequestBytes: MAX_CAPABILITIES_RECORD_BYTES, timeoutMs: CAPABILITIES_READ_TIMEOUT_MS })
    if (request.type === 'get') {
      await writeMessage(frames, deps.current())
    } else {
      deps.received(peer.nodeID, openCapabilities(request.record, peer.nodeID))
      await writeMessage(frames, { type: 'ok' })
    }
    await stream.close()
  }
}

/** Fetches and verifies a peer's record on an open stream. Throws `ProtocolError` for a malformed, oversized or forged one. */
export async function fetchCapabilities (stream: Stream, nodeID: string, options: { signal?: AbortSignal } = {}): Promise<CapabilityRecord> {
  const envelope = await requestOnStream(stream, { type: 'get' }, SignedEnvelope, {
    signal: options.signal, timeoutMs: CAPABILITIES_READ_TIMEOUT_MS, maxRequestBytes: MAX_CAPABILITIES_REQUEST_BYTES, maxAnswerBytes: MAX_CAPABILITIES_RECORD_BYTES
  })
  return openCapabilities(envelope, nodeID)
}

/** Pushes this node's record to a peer on an open stream; resolves once the peer took it. */
export async function pushCapabilities (stream: Stream, envelope: SignedEnvelope<CapabilityRecord>, options: { signal?: AbortSignal } = {}): Promise<void> {
  await requestOnStream(stream, { type: 'push', record: envelope }, PushAnswer, {
    signal: options.signal, timeoutMs: CAPABILITIES_READ_TIMEOUT_MS, maxRequestBytes: MAX_CAPABILITIES_RECORD_BYTES, maxAnswerBytes: MAX_CAPABILITIES_REQUEST_BYTES
  })
}

/** Every model a peer's record says it holds loaded. */
export function loadedModelsOf (record: CapabilityRecord): string[] {
  return record.models.allLoaded ?? (record.models.loaded == null ? [] : [record.models.loaded])
}
