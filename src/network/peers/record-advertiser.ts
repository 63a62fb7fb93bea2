import type { Logger } from 'pino'
import type { NodeIdentity } from '../../identity/index.ts'
import type { HardwareInfo } from '../../system/hardware.ts'
import { backoffDelayMs, canonicalJson, type SignedEnvelope } from '../../wire/index.ts'
import { MAX_ADVERTISED_CERTIFICATES, MAX_ADVERTISED_DEMAND, MAX_ADVERTISED_MODELS, signCapabilities, type CapabilityRecord } from './capabilities.ts'

/** The parts of the record other domains supply: each is the business of the domain that owns it. */
export type RecordParts = Pick<CapabilityRecord, 'models' | 'capacity' | 'pricePer1kTokensMicro' | 'ptnCertificates' | 'agent' | 'demand'>
export type RecordPart = keyof RecordParts

/** What a part is worth until its domain contributes it. */
const DEFAULT_PARTS: RecordParts = {
  models: { loaded: null, downloaded: [] },
  capacity: { slots: 0, busySlots: 0, queued: 0, reservedSlots: 0 },
  pricePer1kTokensMicro: 0,
  ptnCertificates: [],
  agent: null,
  demand: []
}
const PARTS = Object.keys(DEFAULT_PARTS) as RecordPart[]

export interface RecordAdvertiserDeps {
  identity: NodeIdentity
  name: string
  hardware: HardwareInfo
  /** The peers the record goes to when it changes. */
  peers (): string[]
  /** Pushes the record to one peer; throws when the peer did not take it. */
  push (nodeID: string, envelope: SignedEnvelope<CapabilityRecord>, options: { signal: AbortSignal }): Promise<void>
  /** A new version was signed; `loadOnly` when only the load changed (peers connected get it, gossip does not). */
  changed?: (loadOnly: boolean) => void
  log: Logger
}

export interface RecordAdvertiserOptions {
  /**
   * How often every part is read again, though no change was announced (no traffic unless one changed): the safety
   * net for what changes with time and no event (see `changed`). @default 30_000
   */
  checkIntervalMs?: number
  /**
   * A change of the load alone (busy slots, queue) goes out at most this often: it changes with every request, and
   * peers only use it to rank. Any other change goes out at once. @default 5_000
   */
  loadPushIntervalMs?: number
  /** Retry of a push that failed, doubling to 30 s, while the peer stays in the table. @default 500 */
  minRetryMs?: number
}

/**
 * This node's capability record, built from the parts other domains contribute once they are built (models, load,
 * price, PTN certificates, agent profile, demand), signed, and pushed to every peer with a version one higher whenever
 * a part changes. Peers fetch it once when they connect; there is no periodic re-fetch.
 *
 * A part is read when it is contributed and again when its domain announces a change (`changed`), never on every
 * read of the record: the signed record is kept, and `current` hands it out as it is. What changes with time alone
 * and has no event (demand decaying, a PTN certificate expiring, a model file imported) is read again by a slow
 * safety timer, `checkIntervalMs`; peers judge expiry and demand themselves, so a record that lags there misleads no one.
 */
export class RecordAdvertiser {
  readonly #deps: RecordAdvertiserDeps
  readonly #checkIntervalMs: number
  readonly #loadPushIntervalMs: number
  readonly #minRetryMs: number
  readonly #parts = new Map<RecordPart, () => unknown>()
  /** Each part as last read (within the limits peers accept), and its canonical JSON. */
  readonly #values: RecordParts = { ...DEFAULT_PARTS }
  readonly #json = new Map<RecordPart, string>(PARTS.map((part) => [part, canonicalJson(DEFAULT_PARTS[part])]))
  /** Parts announced changed, read again together on the next turn of the event loop. */
  readonly #dirty = new Set<RecordPart>()
  #dirtyCheck: NodeJS.Immediate | null = null
  /** Versions start at the clock, so a restarted node's records are newer than the ones before. */
  #version = Date.now()
  #signed: SignedEnvelope<CapabilityRecord> | null = null
  /** Canonical JSON of the parts signed last, whole and without the load. */
  #lastParts = ''
  #lastRest = ''
  #changedAt = 0
  /** The version last pushed to the peers. */
  #pushedVersion = 0
  readonly #pushing = new Set<string>()
  readonly #again = new Set<string>()
  readonly #retries = new Map<string, NodeJS.Timeout>()
  #timer: NodeJS.Timeout | null = null
  /** A change of the load alone that came too soon after the last version: signed when this fires. */
  #loadTimer: NodeJS.Timeout | null = null
  #shutdown: AbortController | null = null

  constructor (deps: RecordAdvertiserDeps, options: RecordAdvertiserOptions = {}) {
    this.#deps = deps
    this.#checkIntervalMs = options.checkIntervalMs ?? 30_000
    this.#loadPushIntervalMs = options.loadPushIntervalMs ?? 5_000
    this.#minRetryMs = options.minRetryMs ?? 500
  }

  /** A domain's part of the record; replaces an earlier contribution of the same part. */
  contribute<K extends RecordPart> (part: K, value: () => RecordParts[K]): void {
    this.#parts.set(part, value)
    this.#check([part], true)
  }

  /**
   * What `parts` are made of changed (a model loaded, a slot taken, a setting, a membership): they are read again on
   * the next turn of the event loop, with any other part announced meanwhile, and a change goes to the peers. Until
   * `start` and after `stop` nothing is read (the parts' domains may be closing): `start` reads every part.
   */
  changed (...parts: RecordPart[]): void {
    if (this.#shutdown == null) return
    for (const part of parts) this.#dirty.add(part)
    this.#dirtyCheck ??= setImmediate(() => {
      this.#dirtyCheck = null
      const dirty = [...this.#dirty]
      this.#dirty.clear()
      this.#check(dirty, true)
    })
  }

  /** The current record, signed: what a peer that connects fetches. */
  current (): SignedEnvelope<CapabilityRecord> {
    return this.#signed ?? this.#sign(this.#values)
  }

  /** Reads every part, and from now on each change announced, pushing changes to the peers; starts the safety timer. */
  start (): void {
    if (this.#shutdown != null) return
    this.#shutdown = new AbortController()
    this.#timer = setInterval(() => { this.#check(PARTS, true) }, this.#checkIntervalMs)
    this.#timer.unref()
    this.#check(PARTS, true)
  }

  stop (): void {
    this.#shutdown?.abort()
    this.#shutdown = null
    if (this.#timer != null) clearInterval(this.#timer)
    this.#timer = null
    if (this.#loadTimer != null) clearTimeout(this.#loadTimer)
    this.#loadTimer = null
    if (this.#dirtyCheck != null) clearImmediate(this.#dirtyCheck)
    this.#dirtyCheck = null
    this.#dirty.clear()
    for (const retry of this.#retries.values()) clearTimeout(retry)
    this.#retries.clear()
  }

  /** Sends the current record to one peer (one that just came online: it may have fetched an older one). */
  pushTo (nodeID: string, failures = 0): void {
    const signal = this.#shutdown?.signal
    if (signal == null || signal.aborted) return
    if (this.#pushing.has(nodeID)) {
      this.#again.add(nodeID)   // the push under way may carry an older version: send again once it is done
      return
    }
    const retry = this.#retries.get(nodeID)
    if (retry != null) clearTimeout(retry)
    this.#retries.delete(nodeID)
    this.#pushing.add(nodeID)
    this.#deps.push(nodeID, this.current(), { signal }).then(() => {
      this.#pushing.delete(nodeID)
      if (this.#again.delete(nodeID)) this.pushTo(nodeID)
    }, (err: unknown) => {
      this.#pushing.delete(nodeID)
      this.#again.delete(nodeID)
      if (signal.aborted || !this.#deps.peers().includes(nodeID)) return
      const retryInMs = backoffDelayMs(failures + 1, { minMs: this.#minRetryMs, maxMs: 30_000 })
      this.#deps.log.debug({ err, nodeID, retryInMs }, 'record push failed; retrying')
      const timer = setTimeout(() => { this.#retries.delete(nodeID); this.pushTo(nodeID, failures + 1) }, retryInMs)
      timer.unref()
      this.#retries.set(nodeID, timer)
    })
  }

  /**
   * Reads `parts` again: a change makes a new version (a change of the load alone at most every
   * `loadPushIntervalMs`, the rest of the interval waited out); once started, with `push`, every version not sent
   * yet goes to every peer.
   */
  #check (parts: Iterable<RecordPart>, push: boolean): void {
    for (const part of parts) this.#read(part)
    const all = PARTS.map((part) => this.#json.get(part)).join('\n')
    if (all !== this.#lastParts || this.#signed == null) {
      const rest = PARTS.map((part) => part === 'capacity' ? '' : this.#json.get(part)).join('\n')
      const loadOnly = this.#signed != null && rest === this.#lastRest
      const waitMs = loadOnly ? this.#changedAt + this.#loadPushIntervalMs - Date.now() : 0
      if (waitMs <= 0) {
        this.#version++
        this.#sign(this.#values)
        this.#lastParts = all
        this.#lastRest = rest
        this.#changedAt = Date.now()
        this.#deps.changed?.(loadOnly)
      } else if (this.#shutdown != null) {
        this.#loadTimer ??= setTimeout(() => { this.#loadTimer = null; this.#check(['capacity'], true) }, waitMs)
        this.#loadTimer.unref()
      }
    }
    if (!push || this.#shutdown == null || this.#version === this.#pushedVersion) return
    this.#pushedVersion = this.#version
    for (const nodeID of this.#deps.peers()) this.pushTo(nodeID)
  }

  #sign (parts: RecordParts): SignedEnvelope<CapabilityRecord> {
    const record: CapabilityRecord = {
      nodeID: this.#deps.identity.nodeID,
      version: this.#version,
      name: this.#deps.name,
      ...parts,
      hardware: { ...this.#deps.hardware },
      timestamp: Date.now()
    }
    this.#signed = signCapabilities(this.#deps.identity, record)
    return this.#signed
  }

  /** Reads one part from its domain into `#values` (its default while none is contributed). */
  #read (part: RecordPart): void {
    const values = this.#values as Record<RecordPart, unknown>
    const read = this.#parts.get(part)
    values[part] = DEFAULT_PARTS[part]
    try {
      if (read != null) values[part] = read()
    } catch (err) {
      // One domain's failure must not take the whole record down; its part keeps its default meanwhile.
      this.#deps.log.error({ err, part }, 'a part of the capability record failed')
    }
    // What peers accept, whatever a domain hands in: a record over these limits would be refused whole. Lists come
    // most needed first (the PTN domain orders its certificates by use), so what is cut is what is needed least.
    const parts = this.#values
    if (part === 'models') {
      parts.models = {
        loaded: parts.models.loaded,
        ...(parts.models.allLoaded == null ? {} : { allLoaded: parts.models.allLoaded.slice(0, MAX_ADVERTISED_MODELS) }),
        downloaded: parts.models.downloaded.slice(0, MAX_ADVERTISED_MODELS)
      }
    }
    if (part === 'ptnCertificates') parts.ptnCertificates = parts.ptnCertificates.slice(0, MAX_ADVERTISED_CERTIFICATES)
    if (part === 'demand') parts.demand = parts.demand.slice(0, MAX_ADVERTISED_DEMAND)
    this.#json.set(part, canonicalJson(values[part]))
  }
}
