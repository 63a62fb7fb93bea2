import type { Message, TopicValidatorResult } from '@libp2p/gossipsub'
import type { Logger } from 'pino'
import type { NodeIdentity } from '../../identity/index.ts'
import { ProtocolError, isHostile, type PeerStreams, type SignedEnvelope } from '../../wire/index.ts'
import { ADVERTS_TOPIC, Advert, type AdvertBook, DEFAULT_ADVERT_REFRESH_MS, MAX_ADVERT_BYTES, MAX_ADVERT_VALUES, advertTextTooLarge, openAdvert, signAdvert, syncAdverts } from './adverts.ts'
import type { CapabilityRecord } from '../peers/capabilities.ts'
import type { PeerHost } from '../host/libp2p-node.ts'
import { MAX_CLOCK_SKEW_MS } from '../relay/directory.ts'

/**
 * gossipsub's verdicts, by value (its TopicValidatorResult enum): a value import of @libp2p/gossipsub would load the
 * whole package into every node, also while the network is off (bench/README.md); libp2p-node.ts loads it when the
 * node goes online.
 */
const VERDICT = {
  accept: 'accept' as TopicValidatorResult.Accept,
  ignore: 'ignore' as TopicValidatorResult.Ignore,
  reject: 'reject' as TopicValidatorResult.Reject
}

export interface AdvertGossipDeps {
  identity: NodeIdentity
  book: AdvertBook
  /** This node's current record. */
  record: () => SignedEnvelope<CapabilityRecord>
  /** This node's addresses as peers should dial them (circuit ones first). */
  addrs: () => string[]
  /** Streams to peers, for the sync at join. */
  peers: PeerStreams
  /** The connected peers (the peer table), of which one at random is asked again a few times after the first sync. */
  connected: () => string[]
  log: Logger
}

/** Times a node asks a random peer for its adverts again after joining (see `resyncMs`). */
const RESYNC_ROUNDS = 4

export interface AdvertGossipOptions {
  /** Re-publish unchanged this often. @default DEFAULT_ADVERT_REFRESH_MS */
  refreshMs?: number
  /** A change is published this long after it is seen, so that several changes go out as one. @default 500 */
  debounceMs?: number
  /** Peers asked for their adverts when this node joins. @default 2 */
  syncPeers?: number
  /**
   * A random peer is asked again this long after the first sync, then after twice as long, 4 and 8 times as long:
   * nodes that join at the same time first ask peers as new as they are, which know few adverts yet, and their own
   * first adverts may reach only the few nodes connected by then. @default 30_000
   */
  resyncMs?: number
  /** After those, a random peer is asked every this often for what changed since: the repair of any advert gossip did
   *  not bring, sooner than the next refresh. @default DEFAULT_ADVERT_PULL_MS */
  pullMs?: number
}

/** How often a node asks a random peer for the adverts that changed there lately, once its join is over. */
export const DEFAULT_ADVERT_PULL_MS = 2 * 60_000
/** A pull asks for what changed since the last sync began, and this much before (the two peers' views differ by the
 *  time an advert takes to spread): a fixed margin, not one that grows with the time since the last sync, which in a
 *  network a few minutes old takes in nearly every advert and multiplies the idle traffic (bench/README.md). */
export const ADVERT_PULL_WINDOW_MARGIN_MS = 30_000

/**
 * Spreads this node's advert by gossip (libp2p gossipsub): published when its record changes in anything but the load,
 * when its addresses change, and every `refreshMs`; and takes the others' into the `AdvertBook`, checking each before
 * gossipsub passes it on (a forged one is rejected, which costs the peer that sent it its gossip score). A joining node
 * asks its first peers for the adverts they hold: gossip carries only what changes.
 */
export class AdvertGossip {
  readonly #deps: AdvertGossipDeps
  readonly #refreshMs: number
  readonly #debounceMs: number
  readonly #syncPeers: number
  #host: PeerHost | null = null
  #refresh: NodeJS.Timeout | null = null
  #pending: NodeJS.Timeout | null = null
  /** Peers a sync succeeded with since WAN was (re)started. */
  #synced = 0
  readonly #syncing = new Set<string>()
  /** Whether the last publish reached nobody: published again when the mesh gains a peer. */
  #unheard = true
  /** Peers that came online since WAN was (re)started. */
  #online = 0
  readonly #resyncMs: number
  readonly #pullMs: number
  /** When the last sync that succeeded began (null: none yet since WAN was (re)started, so the next asks for all). */
  #lastSyncAt: number | null = null
  #resync: NodeJS.Timeout | null = null
  /** Resyncs scheduled since WAN was (re)started. */
  #resyncs = 0
  /** Whether the first pull was answered (or failed): this node has caught up on the adverts from before it joined. */
  #joined = false

  constructor (deps: AdvertGossipDeps, options: AdvertGossipOptions = {}) {
    this.#deps = deps
    this.#refreshMs = options.refreshMs ?? DEFAULT_ADVERT_REFRESH_MS
    this.#debounceMs = options.debounceMs ?? 500
    this.#syncPeers = options.syncPeers ?? 2
    this.#resyncMs = options.resyncMs ?? 30_000
    this.#pullMs = options.pullMs ?? DEFAULT_ADVERT_PULL_MS
  }

  start (host: PeerHost): void {
    this.#host = host
    const pubsub = host.services.pubsub
    pubsub.topicValidators.set(ADVERTS_TOPIC, (_peer, message) => this.#validate(message))
    pubsub.subscribe(ADVERTS_TOPIC)
    pubsub.addEventListener('gossipsub:graft', this.#onGraft)
    this.#refresh = setInterval(() => { this.publishSoon() }, this.#refreshMs)
    this.#refresh.unref()
  }

  async stop (): Promise<void> {
    const host = this.#host
    this.#host = null
    if (this.#refresh != null) clearInterval(this.#refresh)
    if (this.#pending != null) clearTimeout(this.#pending)
    if (this.#resync != null) clearTimeout(this.#resync)
    this.#refresh = null
    this.#pending = null
    this.#resync = null
    if (host == null) return
    host.services.pubsub.removeEventListener('gossipsub:graft', this.#onGraft)
    host.services.pubsub.unsubscribe(ADVERTS_TOPIC)
    host.services.pubsub.topicValidators.delete(ADVERTS_TOPIC)
  }

  /** WAN restarted (or stopped): the book starts afresh, and the next peers are asked for theirs. */
  reset (): void {
    this.#synced = 0
    this.#online = 0
    this.#resyncs = 0
    this.#joined = false
    this.#lastSyncAt = null
    if (this.#resync != null) clearTimeout(this.#resync)
    this.#resync = null
    this.#deps.book.clear()
  }

  /** Whether this node is still catching up on the adverts from before it joined: until its first pull (whose window
   *  reaches back into the join's resyncs) is answered or fails. After it, what this node hears costs what an idle
   *  network's upkeep does: gossip of what changes, and a pull every `pullMs` of what changed since the last. */
  get joining (): boolean {
    return !this.#joined
  }

  /** Publishes this node's advert shortly (changes within `debounceMs` go out as one). */
  publishSoon (): void {
    if (this.#host == null || this.#pending != null) return
    this.#pending = setTimeout(() => {
      this.#pending = null
      this.#publish(this.#deps.addrs()).catch((err: unknown) => { this.#deps.log.debug({ err }, 'advert publish failed') })
    }, this.#debounceMs)
    this.#pending.unref()
  }

  /** Says this node is leaving (a presence without addresses), so that others forget it at once. */
  async leave (): Promise<void> {
    await this.#publish([])
  }

  /**
   * A peer came online: asked for its adverts while fewer than `syncPeers` have answered. This node's advert is
   * published again when the last one reached nobody, and at its 1st, 2nd, 4th, 8th... peer: a node's first publish
   * may reach only the few nodes connected by then (a first peer whose own gossipsub mesh is not formed yet forwards it
   * to nobody), but each publish is a new message that floods the whole network, so not on every new peer (a node
   * meets its first peers all at once when it starts). Publishing only while unheard, with the pulls below to repair
   * what it missed, left 100 nodes starting together short of knowing each other after 5 minutes (2026-11-23).
   */
  peerOnline (nodeID: string): void {
    this.#online++
    if (this.#unheard || (this.#online & (this.#online - 1)) === 0) this.publishSoon()
    if (this.#synced >= this.#syncPeers || this.#syncing.has(nodeID) || this.#syncing.size >= this.#syncPeers) return
    this.#sync(nodeID)
  }

  /** Asks `nodeID` for its adverts: all of them (`pull` false: at join and in the resyncs after it, when this node may
   *  lack adverts from before any window), or what changed since the last sync began (see ADVERT_PULL_WINDOW_MARGIN_MS). */
  #sync (nodeID: string, pull = false): void {
    this.#syncing.add(nodeID)
    const startedAt = Date.now()
    const changedWithinMs = !pull || this.#lastSyncAt == null ? undefined : startedAt - this.#lastSyncAt + ADVERT_PULL_WINDOW_MARGIN_MS
    syncAdverts(this.#deps.peers, nodeID, { signal: AbortSignal.timeout(30_000), book: this.#deps.book, changedWithinMs }).then(({ adverts, rejected }) => {
      this.#lastSyncAt = Math.max(this.#lastSyncAt ?? startedAt, startedAt)
      if (this.#synced++ === 0) this.#scheduleResync()
      let kept = 0
      for (const { advert, opened } of adverts) if (this.#deps.book.offer(advert, opened) === 'kept') kept++
      this.#deps.log.info({ nodeID, adverts: adverts.length, kept, rejected }, 'adverts synced from a peer')
    }, (err: unknown) => {
      this.#deps.log.debug({ err, nodeID }, 'advert sync failed')
      // No sync has succeeded yet, and no new peer may come online to try again: a resync will, with another peer.
      if (this.#synced === 0) this.#scheduleResync()
    }).finally(() => {
      this.#syncing.delete(nodeID)
      if (pull) this.#joined = true
    })
  }

  /** Asks one connected peer, picked at random, again: `resyncMs` from now, then each time after twice as long, four
   *  times in all; then every `pullMs`. */
  #scheduleResync (): void {
    if (this.#host == null || this.#resync != null) return
    const pull = this.#resyncs >= RESYNC_ROUNDS
    const inMs = pull ? this.#pullMs : this.#resyncMs * 2 ** this.#resyncs++
    this.#resync = setTimeout(() => {
      this.#resync = null
      const peers = this.#deps.connected().filter(nodeID => !this.#syncing.has(nodeID))
      if (this.#host == null) return
      if (peers.length > 0) this.#sync(peers[Math.floor(Math.random() * peers.length)], pull)
      this.#scheduleResync()
    }, inMs)
    this.#resync.unref()
  }

  async #publish (addrs: string[]): Promise<void> {
    const host = this.#host
    if (host == null) return
    const advert = signAdvert(this.#deps.identity, this.#deps.record(), addrs)
    const { recipients } = await host.services.pubsub.publish(ADVERTS_TOPIC, Buffer.from(JSON.stringify(advert)))
    this.#unheard = recipients.length === 0
  }

  readonly #onGraft = (): void => {
    if (this.#unheard) this.publishSoon()
  }

  /**
   * gossipsub's validator: a new advert is kept and passed on; a known one is not; a forged one is rejected. It runs
   * synchronously for every message, so the cheapest checks come first: the text's size and number of values, before
   * JSON.parse builds them; then each signature, before its schema walks the record (`openAdvert`).
   */
  #validate (message: Message): TopicValidatorResult {
    try {
      if (advertTextTooLarge(message.data)) throw new ProtocolError(`Advert over ${MAX_ADVERT_BYTES} bytes or ${MAX_ADVERT_VALUES} values`, 'too_large')
      // An advert's outer shape is what every version checks before it forwards: one that is not is rejected
      const shaped = Advert.safeParse(JSON.parse(Buffer.from(message.data).toString('utf8')))
      if (!shaped.success) return VERDICT.reject
      const advert = shaped.data
      // The advert held already (from a sync) is passed on all the same: the nodes beyond may not have it.
      if (this.#deps.book.holds(advert)) return VERDICT.accept
      // From the future by this node's clock, not by the forwarder's: clocks disagree, and a reject would cost an honest
      // forwarder its score. Dropped, not passed on.
      const signedAt = (advert.presence.body as { timestamp?: unknown } | null)?.timestamp
      if (typeof signedAt === 'number' && signedAt > Date.now() + MAX_CLOCK_SKEW_MS) return VERDICT.ignore
      const opened = openAdvert(advert)
      if (opened.nodeID === this.#deps.identity.nodeID) return VERDICT.ignore
      return this.#deps.book.offer(advert, opened) === 'known' ? VERDICT.ignore : VERDICT.accept
    } catch (err) {
      // Rejected, at a cost to the sender's score, only for what every version of a node checks before it forwards:
      // text that is no JSON, an advert's shape, a forged signature. A bound or a record schema of this version that
      // an older node does not know (an agent profile's size, say) drops the advert without holding the forwarder to
      // account.
      if (err instanceof SyntaxError || (err instanceof ProtocolError && (err.code === 'bad_signature' || err.code === 'wrong_signer'))) return VERDICT.reject
      if (isHostile(err) || (err instanceof Error && err.name === 'ZodError')) return VERDICT.ignore
      this.#deps.log.error({ err }, 'checking a gossiped advert failed')
      return VERDICT.ignore
    }
  }
}
