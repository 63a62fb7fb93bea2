import { EventEmitter } from 'node:events'
import { z } from 'zod'
import type { NodeIdentity } from '../../identity/index.ts'
import { ProtocolError, SignedEnvelope, jsonSize, openEnvelope, type PeerStreams, requestPeer, serveRequest } from '../../wire/index.ts'
import { MAX_CAPABILITIES_RECORD_BYTES, MAX_CAPABILITIES_RECORD_VALUES, openCapabilities, type CapabilityRecord } from '../peers/capabilities.ts'
import { DIRECTORY_PROTOCOL, DirectoryRecord, MAX_CLOCK_SKEW_MS, signDirectoryRecord } from '../relay/directory.ts'
import type { PeerStreamHandler } from '../peers/protocol-registry.ts'

// Adverts: what a node serves, spread by gossip so that every node knows every other one's record without
// being connected to it, and asked of a peer once when a node joins. An advert is the node's signed capability record
// and its signed presence (its addresses, as it registers them at a relay), both checked against the node's key.

export { ADVERTS_TOPIC } from './topic.ts'
/** One request per stream: a joining node asks a peer for the adverts it holds. */
export const ADVERTS_SYNC_PROTOCOL = '/meshnode/adverts/1.0.0'
/** One advert, on the topic or in a sync answer: a record at its largest, its presence, and room to spare. */
export const MAX_ADVERT_BYTES = MAX_CAPABILITIES_RECORD_BYTES + 16 * 1024
/** JSON values in one advert at most: a record's, and its presence's (about 20), with room to spare. */
export const MAX_ADVERT_VALUES = MAX_CAPABILITIES_RECORD_VALUES + 64
/** The largest sync answer: the most recently heard adverts that fit. */
export const MAX_SYNC_ANSWER_BYTES = 4 * 1024 * 1024
export const MAX_SYNC_ADVERTS = 4096
export const ADVERTS_SYNC_TIMEOUT_MS = 10_000
export const MAX_INBOUND_SYNC_STREAMS = 4
/** A node re-publishes its advert this often even when nothing changed, so that others know it is still there. */
export const DEFAULT_ADVERT_REFRESH_MS = 20 * 60_000
/** An advert not renewed for this long is forgotten (a node that left without saying so). */
export const DEFAULT_ADVERT_TTL_MS = 3 * DEFAULT_ADVERT_REFRESH_MS
/** Adverts a node keeps at most; the least recently renewed go first. */
export const MAX_ADVERTS = 100_000
/**
 * What a parsed advert costs held, per JSON value, beside its text: about what V8 spends on an object or array parsed
 * from JSON (measured: 65 bytes an empty object); a string or number costs less, which this overestimates.
 */
export const ADVERT_VALUE_BYTES = 64
/**
 * The memory the adverts a node keeps may take at most (their `bytes`); the least recently renewed go first. Room for
 * MAX_ADVERTS adverts of a node with a few models, a certificate and an agent profile (about 5 KB each); adverts at
 * the largest the limits allow (about 0.5 MB) fill it at a thousand, where the count alone would have let them take 50 GB.
 */
export const MAX_ADVERT_BOOK_BYTES = 512 * 1024 * 1024

export const Advert = z.object({ record: SignedEnvelope, presence: SignedEnvelope })
export type Advert = z.infer<typeof Advert>

/** A sync asks for every advert held, or (`changedWithinMs`) for those that changed here within that many ms: the answering
 *  node's own clock, so no clocks need agree. A node before this field ignores it and answers with every advert.
 *  `known`, with a window, is how many adverts the asker holds: an answerer that holds more answers with all of them, so
 *  that a node which missed adverts older than any window catches up at its next pull instead of never. */
const SyncRequest = z.object({
  type: z.literal('list'),
  changedWithinMs: z.number().int().positive().max(DEFAULT_ADVERT_TTL_MS).optional(),
  known: z.number().int().nonnegative().max(MAX_ADVERTS).optional()
})
const SyncAnswer = z.object({ adverts: z.array(Advert).max(MAX_SYNC_ADVERTS) })

/** An advert checked: both parts signed by the node they name. A presence without addresses says the node left. */
export interface OpenedAdvert {
  nodeID: string
  record: CapabilityRecord
  presence: DirectoryRecord
  /** About what the advert costs held: the length of its JSON text, and ADVERT_VALUE_BYTES per value in it. */
  bytes: number
}

/**
 * Checks an advert (throws `ProtocolError` for a forged or malformed one): its size first (MAX_ADVERT_BYTES of text,
 * MAX_ADVERT_VALUES values, counted only that far), then each part's signature before its schema (`openCapabilities`).
 * The bounds hold for the whole advert, unknown fields included: those are signed and kept with it, never parsed.
 */
export function openAdvert (advert: Advert, now: number = Date.now()): OpenedAdvert {
  const nodeID = advert.record.signer
  const size = jsonSize(advert, { maxChars: MAX_ADVERT_BYTES, maxValues: MAX_ADVERT_VALUES })
  if (size == null) throw new ProtocolError(`Advert of ${nodeID} exceeds ${MAX_ADVERT_BYTES} characters or ${MAX_ADVERT_VALUES} values`, 'too_large')
  const record = openCapabilities(advert.record, nodeID)
  const presence = openEnvelope(advert.presence, DirectoryRecord, { domain: DIRECTORY_PROTOCOL, expectedSigner: nodeID })
  if (presence.nodeID !== nodeID) throw new ProtocolError(`Presence names ${presence.nodeID} but is signed by ${nodeID}`, 'invalid')
  if (presence.timestamp > now + MAX_CLOCK_SKEW_MS) throw new ProtocolError(`Presence of ${nodeID} is from the future`, 'invalid')
  return { nodeID, record, presence, bytes: size.chars + ADVERT_VALUE_BYTES * size.values }
}

/**
 * Whether a gossiped advert's text is over MAX_ADVERT_BYTES or holds more than MAX_ADVERT_VALUES values, counted in
 * its bytes before JSON.parse builds anything: a message of empty objects costs a scan, not the objects. Values are
 * counted as `jsonSize` counts them (the whole, and each element and member); text that is no JSON is JSON.parse's to
 * refuse.
 */
export function advertTextTooLarge (data: Uint8Array): boolean {
  if (data.byteLength > MAX_ADVERT_BYTES) return true
  let values = 1
  let inString = false
  /** Just past `[` or `{`: the next token is a first element unless it closes the container. */
  let opened = false
  for (let i = 0; i < data.byteLength; i++) {
    const c = data[i]
    if (inString) {
      if (c === 0x5c) i++   // backslash: the next byte is escaped
      else if (c === 0x22) inString = false
      continue
    }
    if (c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09) continue
    if ((opened && c !== 0x5d && c !== 0x7d) || c === 0x2c) values++
    opened = c === 0x5b || c === 0x7b
    if (c === 0x22) inString = true
    if (values > MAX_ADVERT_VALUES) return true
  }
  return false
}

/** This node's advert: its current record and addresses (none: it is leaving). */
export function signAdvert (identity: NodeIdentity, record: SignedEnvelope<CapabilityRecord>, addrs: string[]): Advert {
  return { record, presence: signDirectoryRecord(identity, addrs) }
}

export interface AdvertEntry {
  readonly nodeID: string
  readonly advert: Advert
  readonly record: CapabilityRecord
  readonly addrs: string[]
  /** Unix ms the node signed its presence: the advert lives `ttlMs` from then, wherever it was heard. */
  readonly signedAt: number
  /** Unix ms this node heard it. */
  readonly heardAt: number
  /** Unix ms this node first heard this version of the record at these addresses: a renewal alone (a later presence,
   *  nothing else new) keeps it. What a windowed sync (`changedWithinMs`) asks for. */
  readonly changedAt: number
  /** What it costs held (`OpenedAdvert.bytes`). */
  readonly bytes: number
}

export interface AdvertBookEvents {
  /** A node's advert is new here, or newer. */
  advert: [entry: AdvertEntry]
  /** A node said it left, or its advert expired or was found stale. */
  gone: [nodeID: string]
}

/** What `offer` made of an advert: kept (new or newer), a node that left, the one held already, or an older one. */
export type OfferResult = 'kept' | 'left' | 'same' | 'known'

/**
 * The adverts this node has heard: one per node, the newest (a higher record version, or the same record with a later
 * presence), each forgotten `ttlMs` after its node signed it unless renewed, or at once when the node says it left.
 * At most MAX_ADVERTS of them, weighing at most `maxBytes` together: past either, the least recently renewed go.
 */
export class AdvertBook extends EventEmitter<AdvertBookEvents> {
  readonly #self: string
  readonly #ttlMs: number
  readonly #maxBytes: number
  readonly #entries = new Map<string, AdvertEntry>()
  /**
   * The nodes that said they left, with the record version and presence time they left at, for `ttlMs`: an advert of
   * theirs from before it (replayed by anyone) does not bring them back. At most MAX_ADVERTS, the oldest going first.
   */
  readonly #left = new Map<string, { version: number, signedAt: number }>()
  #bytes = 0

  /**
   * @param options.ttlMs how long an advert lives after its node signed it. @default DEFAULT_ADVERT_TTL_MS
   * @param options.maxBytes what the adverts kept may cost together (`AdvertEntry.bytes`). @default MAX_ADVERT_BOOK_BYTES
   */
  constructor (self: string, options: { ttlMs?: number, maxBytes?: number } = {}) {
    super()
    this.#self = self
    this.#ttlMs = options.ttlMs ?? DEFAULT_ADVERT_TTL_MS
    this.#maxBytes = options.maxBytes ?? MAX_ADVERT_BOOK_BYTES
  }

  get size (): number {
    return this.#entries.size
  }

  /** What the adverts kept cost together (the sum of their `bytes`). */
  get bytes (): number {
    return this.#bytes
  }

  /** Takes a checked advert when it says something new. */
  offer (advert: Advert, opened: OpenedAdvert, now: number = Date.now()): OfferResult {
    const { nodeID, record, presence } = opened
    if (nodeID === this.#self || presence.timestamp + this.#ttlMs <= now) return 'known'
    const held = this.#entries.get(nodeID)
    if (held != null && record.version === held.record.version && presence.timestamp === held.signedAt) return 'same'
    if (held != null && (record.version < held.record.version || (record.version === held.record.version && presence.timestamp < held.signedAt))) return 'known'
    const left = this.#left.get(nodeID)
    if (left != null && left.signedAt + this.#ttlMs > now &&
      (record.version < left.version || (record.version === left.version && presence.timestamp <= left.signedAt))) return 'known'
    if (presence.addrs.length === 0) {
      this.#remember(nodeID, { version: record.version, signedAt: presence.timestamp }, now)
      if (held == null) return 'known'
      this.forget(nodeID)
      return 'left'
    }
    this.#left.delete(nodeID)
    const renewal = held != null && held.record.version === record.version && sameAddrs(held.addrs, presence.addrs)
    const entry: AdvertEntry = {
      nodeID, advert, record, addrs: presence.addrs, signedAt: presence.timestamp, heardAt: now, changedAt: renewal ? held.changedAt : now, bytes: opened.bytes
    }
    if (held != null) this.#bytes -= held.bytes
    this.#entries.delete(nodeID)   // re-inserted last: the map's order is the order of renewal
    this.#entries.set(nodeID, entry)
    this.#bytes += entry.bytes
    for (const oldest of this.#entries.keys()) {
      if (oldest === nodeID || (this.#entries.size <= MAX_ADVERTS && this.#bytes <= this.#maxBytes)) break
      this.forget(oldest)
    }
    this.emit('advert', entry)
    return 'kept'
  }

  /** Remembers that `nodeID` left, dropping what is past its time and, past MAX_ADVERTS, the oldest. */
  #remember (nodeID: string, left: { version: number, signedAt: number }, now: number): void {
    this.#left.delete(nodeID)
    this.#left.set(nodeID, left)
    for (const [id, { signedAt }] of this.#left) {
      if (this.#left.size <= MAX_ADVERTS && signedAt + this.#ttlMs > now) break
      this.#left.delete(id)
    }
  }

  /**
   * Whether `advert` is exactly the one held for its node, which was checked when it was taken: it need not be checked
   * again. A sync answer repeats the adverts a node has already, and gossip brings back what a sync brought, and
   * checking each again (two signature verifications) is a large part of what a large network spends starting
   * (bench/README.md). Anything else, a copy re-encoded included, is checked in full.
   */
  holds (advert: Advert, now: number = Date.now()): boolean {
    const entry = this.#entries.get(advert.record.signer)
    if (entry == null || entry.signedAt + this.#ttlMs <= now) return false
    const held = entry.advert
    return held.record.signature === advert.record.signature && held.presence.signature === advert.presence.signature &&
      JSON.stringify(held) === JSON.stringify(advert)
  }

  get (nodeID: string, now: number = Date.now()): AdvertEntry | null {
    const entry = this.#entries.get(nodeID)
    if (entry == null) return null
    if (entry.signedAt + this.#ttlMs > now) return entry
    this.forget(nodeID)
    return null
  }

  /** The live adverts, most recently renewed first. */
  list (now: number = Date.now()): AdvertEntry[] {
    const out: AdvertEntry[] = []
    for (const entry of [...this.#entries.values()].reverse()) {
      if (entry.signedAt + this.#ttlMs > now) out.push(entry)
      else this.forget(entry.nodeID)
    }
    return out
  }

  forget (nodeID: string): void {
    const entry = this.#entries.get(nodeID)
    if (entry == null) return
    this.#entries.delete(nodeID)
    this.#bytes -= entry.bytes
    this.emit('gone', nodeID)
  }

  clear (): void {
    for (const nodeID of [...this.#entries.keys()]) this.forget(nodeID)
    this.#left.clear()
  }
}

function sameAddrs (a: string[], b: string[]): boolean {
  return a.length === b.length && a.every((addr, i) => addr === b[i])
}

/** The sync protocol's serving side: this node's own advert, and the adverts held (all, or those changed within the
 *  asked window), most recently renewed first, that fit. */
export function createAdvertsSyncHandler (deps: { book: AdvertBook, own: () => Advert }): PeerStreamHandler {
  return async (stream) => {
    await serveRequest(stream, SyncRequest, (request) => {
      const adverts: Advert[] = [deps.own()]
      let bytes = JSON.stringify(adverts[0]).length + 64
      const now = Date.now()
      // The asker's book and ours both leave out their own node and hold the other's: equal counts, equal knowledge
      const behind = request.known != null && deps.book.size > request.known
      const since = request.changedWithinMs == null || behind ? -Infinity : now - request.changedWithinMs
      for (const entry of deps.book.list(now)) {
        if (entry.changedAt < since) continue
        const size = JSON.stringify(entry.advert).length + 1
        if (bytes + size > MAX_SYNC_ANSWER_BYTES || adverts.length >= MAX_SYNC_ADVERTS) break
        adverts.push(entry.advert)
        bytes += size
      }
      return { adverts }
    }, { maxRequestBytes: 1024, maxAnswerBytes: MAX_SYNC_ANSWER_BYTES, timeoutMs: ADVERTS_SYNC_TIMEOUT_MS })
  }
}

/**
 * Asks a peer for the adverts it holds (all, or those that changed there within `changedWithinMs`, or all when it holds
 * more than `book`); each is checked
 * here (one that does not verify is dropped and counted), except those `book` holds already, which are left out.
 */
export async function syncAdverts (peers: PeerStreams, nodeID: string, options: { signal?: AbortSignal, book?: AdvertBook, changedWithinMs?: number } = {}): Promise<{ adverts: Array<{ advert: Advert, opened: OpenedAdvert }>, rejected: number }> {
  const request = options.changedWithinMs == null
    ? { type: 'list' }
    : { type: 'list', changedWithinMs: Math.min(Math.ceil(options.changedWithinMs), DEFAULT_ADVERT_TTL_MS), ...(options.book == null ? {} : { known: Math.min(options.book.size, MAX_ADVERTS) }) }
  const answer = await requestPeer(peers, nodeID, ADVERTS_SYNC_PROTOCOL, request, SyncAnswer, {
    signal: options.signal, timeoutMs: ADVERTS_SYNC_TIMEOUT_MS, maxRequestBytes: 1024, maxAnswerBytes: MAX_SYNC_ANSWER_BYTES
  })
  const adverts: Array<{ advert: Advert, opened: OpenedAdvert }> = []
  let rejected = 0
  for (const advert of answer.adverts) {
    if (options.book?.holds(advert) === true) continue
    try {
      adverts.push({ advert, opened: openAdvert(advert) })
    } catch (err) {
      if (!(err instanceof ProtocolError)) throw err
      rejected++
    }
  }
  return { adverts, rejected }
}
