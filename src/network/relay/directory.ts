import { isPeerId, type Connection, type PeerId, type Stream, type StreamHandler } from '@libp2p/interface'
import { multiaddr } from '@multiformats/multiaddr'
import type { Libp2p } from 'libp2p'
import type { Logger } from 'pino'
import { z } from 'zod'
import { NodeID, type NodeIdentity } from '../../identity/index.ts'
import { ProtocolError, SignedEnvelope, openEnvelope, requestOnStream, serveRequest, signEnvelope } from '../../wire/index.ts'
import { openStream, peerIdToNodeID } from '../host/peer-ids.ts'

// The relay's rendezvous: a node registers a record of where it can be reached, signed by its node key, and lists
// the records of the others. The relay is not trusted: every record is checked by whoever reads it.
export const DIRECTORY_PROTOCOL = '/meshnode/directory/1.0.0'   // new version on any wire change
export const MAX_DIRECTORY_REQUEST_BYTES = 64 * 1024            // one record with all its addresses, with room to spare
export const MAX_DIRECTORY_RESPONSE_BYTES = 4 * 1024 * 1024     // MAX_DIRECTORY_ENTRIES records of the largest size
export const MAX_DIRECTORY_ENTRIES = 1024
export const MAX_RECORD_ADDRS = 12
export const MAX_ADDR_CHARS = 256
export const DIRECTORY_READ_TIMEOUT_MS = 10_000
/** A record is refused when its timestamp is further than this from the relay's clock (replay of an old record). */
export const MAX_CLOCK_SKEW_MS = 5 * 60_000
/** A record is dropped this long after its last registration unless renewed. */
export const DEFAULT_RECORD_TTL_MS = 90_000
const MAX_INBOUND_DIRECTORY_STREAMS = 4

const Addr = z.string().min(1).max(MAX_ADDR_CHARS).refine(isMultiaddr, 'expected a multiaddr')

/** Where a node can be reached: its relay circuit addresses and direct addresses, as multiaddr strings. */
export const DirectoryRecord = z.object({
  nodeID: NodeID,
  addrs: z.array(Addr).max(MAX_RECORD_ADDRS),
  /** Unix ms when the node signed it. */
  timestamp: z.number().int().nonnegative()
})
export type DirectoryRecord = z.infer<typeof DirectoryRecord>

export const DirectoryRequest = z.discriminatedUnion('type', [
  z.object({ type: z.literal('register'), record: SignedEnvelope }),
  /** `limit`: at most this many records, picked at random (a node that wants a few peers, not the whole directory);
   *  without it, all of them up to `MAX_DIRECTORY_ENTRIES` (older nodes send none). */
  z.object({ type: z.literal('list'), limit: z.number().int().positive().max(MAX_DIRECTORY_ENTRIES).optional() })
])
export type DirectoryRequest = z.infer<typeof DirectoryRequest>

export const DirectoryResponse = z.discriminatedUnion('type', [
  z.object({ type: z.literal('registered'), ttlMs: z.number().int().positive() }),
  z.object({ type: z.literal('peers'), records: z.array(SignedEnvelope).max(MAX_DIRECTORY_ENTRIES) }),
  z.object({ type: z.literal('refused'), reason: z.string().max(1000) })
])
export type DirectoryResponse = z.infer<typeof DirectoryResponse>

function isMultiaddr (value: string): boolean {
  try {
    multiaddr(value)
    return true
  } catch (err) {
    // A string that does not parse is exactly what this check exists to refuse.
    if (err instanceof Error) return false
    throw err
  }
}

/** This node's addresses as it tells them (to a relay, in its advert): circuit ones first (reachable from anywhere). */
export function advertisedAddrs (host: Libp2p): string[] {
  const all = host.getMultiaddrs().map(String).filter(addr => addr.length <= MAX_ADDR_CHARS)
  const circuit = all.filter(addr => addr.includes('/p2p-circuit'))
  const direct = all.filter(addr => !addr.includes('/p2p-circuit'))
  return [...circuit, ...direct].slice(0, MAX_RECORD_ADDRS)
}

/** Signs this node's directory record. */
export function signDirectoryRecord (identity: NodeIdentity, addrs: string[], now: number = Date.now()): SignedEnvelope<DirectoryRecord> {
  return signEnvelope(identity, { nodeID: identity.nodeID, addrs, timestamp: now }, { domain: DIRECTORY_PROTOCOL })
}

interface DirectoryEntry {
  /** As received: re-served byte-for-byte in meaning, so fields a newer node adds still verify at the reader. */
  envelope: SignedEnvelope
  record: DirectoryRecord
  peerId: PeerId
  expiresAt: number
}

export interface RelayDirectoryDeps {
  /** Whether the relay still has a connection to the peer; a record is only listed while its node is connected. */
  isConnected (peer: PeerId): boolean
}

export interface RelayDirectoryOptions {
  /** How long a registration lasts without renewal. @default 90_000 */
  recordTtlMs?: number
  /** Most records held at once. @default MAX_DIRECTORY_ENTRIES */
  maxEntries?: number
}

/** The relay's in-memory directory. No timers: expired and disconnected records are dropped when read. */
export class RelayDirectory {
  readonly recordTtlMs: number
  readonly #maxEntries: number
  readonly #isConnected: (peer: PeerId) => boolean
  readonly #entries = new Map<string, DirectoryEntry>()

  constructor (deps: RelayDirectoryDeps, options: RelayDirectoryOptions = {}) {
    this.#isConnected = deps.isConnected
    this.recordTtlMs = options.recordTtlMs ?? DEFAULT_RECORD_TTL_MS
    this.#maxEntries = Math.min(options.maxEntries ?? MAX_DIRECTORY_ENTRIES, MAX_DIRECTORY_ENTRIES)
  }

  /**
   * Accepts a record sent by `remotePeer` over an authenticated connection. The record must be signed by that same
   * peer's key and name it: an unsigned claim, or one signed by anyone else, is refused with a `ProtocolError`.
   */
  register (envelope: SignedEnvelope, remotePeer: PeerId, now: number = Date.now()): DirectoryRecord {
    const nodeID = peerIdToNodeID(remotePeer)
    const record = openEnvelope(envelope, DirectoryRecord, { domain: DIRECTORY_PROTOCOL, expectedSigner: nodeID })
    if (record.nodeID !== nodeID) throw new ProtocolError(`Record names ${record.nodeID} but was sent by ${nodeID}`, 'refused')
    if (Math.abs(now - record.timestamp) > MAX_CLOCK_SKEW_MS) {
      throw new ProtocolError(`Record timestamp ${record.timestamp} is more than ${MAX_CLOCK_SKEW_MS} ms from the relay's clock`, 'refused')
    }
    const existing = this.#entries.get(nodeID)
    if (existing != null && existing.record.timestamp > record.timestamp) {
      throw new ProtocolError(`Record of ${nodeID} is older than the one registered`, 'refused')
    }
    if (existing == null && this.#entries.size >= this.#maxEntries) {
      this.#prune(now)
      if (this.#entries.size >= this.#maxEntries) throw new ProtocolError(`Directory is full (${this.#maxEntries} records)`, 'refused')
    }
    this.#entries.set(nodeID, { envelope, record, peerId: remotePeer, expiresAt: now + this.recordTtlMs })
    return record
  }

  /** The records of connected nodes whose registration has not expired: all, or `limit` of them picked at random. */
  list (now: number = Date.now(), limit?: number): SignedEnvelope[] {
    this.#prune(now)
    const all = [...this.#entries.values()].map(entry => entry.envelope)
    return limit == null || limit >= all.length ? all : shuffle(all).slice(0, limit)
  }

  /** Number of records held, expired ones included until the next read. */
  get size (): number {
    return this.#entries.size
  }

  #prune (now: number): void {
    for (const [nodeID, entry] of this.#entries) {
      if (entry.expiresAt <= now || !this.#isConnected(entry.peerId)) this.#entries.delete(nodeID)
    }
  }
}

/** The relay's handler: one request per stream, answered and closed. */
export function createDirectoryHandler (deps: { directory: RelayDirectory, log: Logger }): StreamHandler {
  return async (stream, connection) => {
    const peer = connection.remotePeer.toString()
    try {
      await serveRequest(stream, DirectoryRequest, (request): DirectoryResponse => {
        if (request.type === 'list') return { type: 'peers', records: deps.directory.list(Date.now(), request.limit) }
        try {
          deps.directory.register(request.record, connection.remotePeer)
          return { type: 'registered', ttlMs: deps.directory.recordTtlMs }
        } catch (err) {
          // A well-formed request we will not honour gets an answer saying why; only a broken frame costs the stream.
          if (!(err instanceof ProtocolError)) throw err
          deps.log.warn({ peer, reason: err.message, code: err.code }, 'directory registration refused')
          return { type: 'refused', reason: err.message.slice(0, 1000) }
        }
      }, { maxRequestBytes: MAX_DIRECTORY_REQUEST_BYTES, maxAnswerBytes: MAX_DIRECTORY_RESPONSE_BYTES, timeoutMs: DIRECTORY_READ_TIMEOUT_MS })
    } catch (err) {
      deps.log.warn({ err, peer }, 'directory stream refused or failed')
      stream.abort(err instanceof Error ? err : new Error(String(err)))
    }
  }
}

export async function handleDirectory (host: Libp2p, deps: { directory: RelayDirectory, log: Logger }): Promise<void> {
  await host.handle(DIRECTORY_PROTOCOL, createDirectoryHandler(deps), { maxInboundStreams: MAX_INBOUND_DIRECTORY_STREAMS, runOnLimitedConnection: true })
}

/**
 * The relay asked: a peer id (any connection to it), or the connection a client opened at the relay's own address.
 * Two relays that share a key are one peer to libp2p, so only the connection says which relay's directory is asked.
 */
export type DirectoryServer = PeerId | Connection

async function ask (host: Libp2p, relay: DirectoryServer, request: DirectoryRequest, options: { signal?: AbortSignal }): Promise<DirectoryResponse> {
  const stream: Stream = isPeerId(relay)
    ? await openStream(host, relay, DIRECTORY_PROTOCOL, options)
    : await relay.newStream(DIRECTORY_PROTOCOL, { signal: options.signal, runOnLimitedConnection: true })
  const response = await requestOnStream(stream, request, DirectoryResponse, {
    signal: options.signal, timeoutMs: DIRECTORY_READ_TIMEOUT_MS, maxRequestBytes: MAX_DIRECTORY_REQUEST_BYTES, maxAnswerBytes: MAX_DIRECTORY_RESPONSE_BYTES
  })
  if (response.type === 'refused') throw new ProtocolError(`Relay refused: ${response.reason}`, 'refused')
  return response
}

/** Registers (or renews) this node's record at the relay; throws `ProtocolError` `refused` with the relay's reason. */
export async function registerInDirectory (host: Libp2p, relay: DirectoryServer, envelope: SignedEnvelope<DirectoryRecord>, options: { signal?: AbortSignal } = {}): Promise<{ ttlMs: number }> {
  const response = await ask(host, relay, { type: 'register', record: envelope }, options)
  if (response.type !== 'registered') throw new ProtocolError(`Expected "registered", got "${response.type}"`, 'invalid')
  return { ttlMs: response.ttlMs }
}

export interface DirectoryListing {
  /** Records whose signature verified and whose signer is the node they name. */
  records: DirectoryRecord[]
  /** Records dropped because they did not verify: a relay that forges or corrupts them. */
  rejected: number
}

/**
 * Lists the records registered at the relay (all, or `limit` picked at random), each verified here: the relay is not
 * trusted to vouch for them.
 */
export async function listDirectory (host: Libp2p, relay: DirectoryServer, options: { signal?: AbortSignal, limit?: number } = {}): Promise<DirectoryListing> {
  const request: DirectoryRequest = options.limit == null ? { type: 'list' } : { type: 'list', limit: Math.min(Math.max(1, Math.floor(options.limit)), MAX_DIRECTORY_ENTRIES) }
  const response = await ask(host, relay, request, options)
  if (response.type !== 'peers') throw new ProtocolError(`Expected "peers", got "${response.type}"`, 'invalid')
  const records: DirectoryRecord[] = []
  let rejected = 0
  for (const envelope of response.records) {
    try {
      const record = openEnvelope(envelope, DirectoryRecord, { domain: DIRECTORY_PROTOCOL, expectedSigner: envelope.signer })
      if (record.nodeID === envelope.signer) records.push(record)
      else rejected++
    } catch (err) {
      // One bad record is the relay's fault, not the listing's: count it and keep the others.
      if (!(err instanceof ProtocolError)) throw err
      rejected++
    }
  }
  return { records, rejected }
}

/** A shuffled copy (Fisher-Yates): every node picks a different random part of the listing. */
export function shuffle<T> (items: T[]): T[] {
  const out = [...items]
  for (let i = out.length - 1; i > 0; i--) {
    const j = Math.floor(Math.random() * (i + 1))
    const swap = out[i]
    out[i] = out[j]
    out[j] = swap
  }
  return out
}
