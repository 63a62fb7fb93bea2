import { createHash } from 'node:crypto'
import type { Logger } from 'pino'
import { BusyError, InvalidInputError, UnavailableError } from '../errors.ts'
import { ContextOverflowError, type ChatRouter, type InferenceEvent, type LocalRouter, type ModelListing, type RoutedGeneration, type RoutedRequest, type RouteOptions, type ServedBy } from '../inference/index.ts'
import { billableTokens, type InferenceCharge, type InferenceChargeRequest } from '../wallet/index.ts'
import type { PeerStreams } from '../wire/index.ts'
import { BillableTokens, RemoteInferenceError, requestInference, type InferAsk } from './infer.ts'
import { ConversationAffinity, conversationKeys, type ConversationAffinityOptions, type ConversationKeys } from './affinity.ts'
import { loadedModelsOf, type PeerInfo } from '../network/index.ts'

/** What the router uses of the peer network (`PeerNetwork` has it). */
export interface RouterNetwork extends PeerStreams {
  peers (): PeerInfo[]
}

/**
 * Pays peers for what they generate (the wallet's `openInferenceCharge`). `open` is called once per request, before
 * it goes out to any peer, with the price of the best peer (the one asked first), and may throw
 * (InsufficientCreditsError: the request fails with 402 before any peer works on it); the charge is settled with the
 * peer that answered, at its own price, up to what the balance holds.
 */
export interface InferenceBilling {
  open (request: InferenceChargeRequest): InferenceCharge
}

export interface PeerRouterDeps {
  /** Runs requests on this node's engine (`LocalRouter`). */
  local: Pick<LocalRouter, 'route' | 'models' | 'serves' | 'notServed'>
  network: RouterNetwork
  /** Counts a request for a model nobody serves (the models' demand tracker). */
  demand: { record (modelID: string): void }
  settings: { get (): { inference_backend: string } }
  sameModel: (a: string, b: string) => boolean
  billing?: InferenceBilling
  log: Logger
}

export interface PeerRouterOptions {
  /** Peers tried for one request before giving up (failover before the first token). @default 3 */
  maxAttempts?: number
  /** Deadline for reaching a peer and opening the stream. @default 10_000 */
  openTimeoutMs?: number
  /** Deadline for a peer's whole answer, from asking to its last frame. @default INFER_ANSWER_DEADLINE_MS */
  answerDeadlineMs?: number
  /** Bounds of the conversation affinity table (size, age, clock). */
  affinity?: ConversationAffinityOptions
}

/**
 * Places a request (a chat, a text completion, embeddings): on this node when its loaded model is the one named (and `inference_backend` is not
 * `peers`), else on the best peer that serves it, falling over to the next while no token has arrived. The answer
 * streams back as the same events the local engine gives; a failure after the first token ends the stream with it.
 * A requester's next turn of a conversation goes first to the peer that answered the last one (it holds the evaluated
 * prompt), while that peer is still a candidate with a free slot.
 */
export class PeerRouter implements ChatRouter {
  readonly #deps: PeerRouterDeps
  readonly #maxAttempts: number
  readonly #openTimeoutMs: number
  readonly #answerDeadlineMs: number | undefined
  readonly #affinity: ConversationAffinity

  constructor (deps: PeerRouterDeps, options: PeerRouterOptions = {}) {
    this.#deps = deps
    this.#maxAttempts = options.maxAttempts ?? 3
    this.#openTimeoutMs = options.openTimeoutMs ?? 10_000
    this.#answerDeadlineMs = options.answerDeadlineMs
    this.#affinity = new ConversationAffinity(options.affinity)
  }

  route (request: RoutedRequest, options: RouteOptions = {}): RoutedGeneration {
    const peersOnly = this.#deps.settings.get().inference_backend === 'peers'
    if (!peersOnly && this.#deps.local.serves(request.modelID)) {
      return this.#deps.local.route(request, options)
    }
    const candidates = this.candidates(request.modelID, options.ptnID ?? null)
    if (candidates.length === 0) {
      this.#deps.demand.record(request.modelID)
      const where = options.ptnID == null ? 'no peer serves it' : `no member of PTN ${options.ptnID} serves it`
      // 503 where the model exists but the rules keep the request from it; 404 only where nobody has it at all.
      if (peersOnly) throw new UnavailableError(`Model ${request.modelID}: inference_backend is "peers" and ${where}`)
      const outside = options.ptnID == null ? 0 : this.candidates(request.modelID).length
      if (outside > 0) throw new UnavailableError(`Model ${request.modelID} is served by ${outside} peer(s), but ${where}`)
      throw this.#deps.local.notServed(request.modelID, ` and ${where}`)
    }
    // Only a named requester's requests share a prompt cache at a peer, so only theirs have an affinity.
    const keys = options.requester == null ? null : conversationKeys(options.requester, request)
    if (keys != null) preferAffine(candidates, this.#affinity, keys)
    const attempt = { servedBy: `peer:${candidates[0].nodeID}` as ServedBy }
    const events = this.#failover(candidates.slice(0, this.#maxAttempts), request, options, attempt, keys)
    return {
      events,
      get servedBy () { return attempt.servedBy }
    }
  }

  /**
   * Peers that serve `modelID` now, best first: online before degraded, a free slot before none, lower load, lower
   * latency, lower price. With a `ptnID`, only peers whose certificates prove them members of that PTN.
   */
  candidates (modelID: string, ptnID: string | null = null): PeerInfo[] {
    return this.#deps.network.peers()
      .filter(peer => loadedModelsOf(peer.record).some(loaded => this.#deps.sameModel(loaded, modelID)))
      .filter(peer => ptnID == null || peer.ptnIDs.includes(ptnID))
      .map(peer => ({ peer, key: rankKey(peer) }))
      .sort((a, b) => compareKeys(a.key, b.key))
      .map(({ peer }) => peer)
  }

  /**
   * The local models, then each model peers serve (named as the first peer that lists it spells it) with the peer
   * `candidates` would rank first for it. One pass groups the peers by model; each group's best is picked once.
   */
  models (): ModelListing[] {
    const { sameModel } = this.#deps
    const listed = this.#deps.settings.get().inference_backend === 'peers' ? [] : this.#deps.local.models()
    // In the order each model is first seen; a group's peers in the network's order, each once (as candidates has them).
    const groups: Array<{ modelID: string, peers: PeerInfo[] }> = []
    const byID = new Map<string, { modelID: string, peers: PeerInfo[] }>()
    for (const peer of this.#deps.network.peers()) {
      for (const loaded of loadedModelsOf(peer.record)) {
        let group = byID.get(loaded) ?? groups.find(known => sameModel(known.modelID, loaded))
        if (group == null) {
          group = { modelID: loaded, peers: [] }
          groups.push(group)
        }
        // An id that is not valid matches nothing, itself included: each of its mentions stands alone.
        if (sameModel(loaded, loaded)) byID.set(loaded, group)
        if (group.peers.at(-1) !== peer) group.peers.push(peer)
      }
    }
    for (const { modelID, peers } of groups) {
      if (listed.some(model => sameModel(model.modelID, modelID))) continue
      let best = peers[0]
      let bestKey = rankKey(best)
      for (const peer of peers.slice(1)) {
        const key = rankKey(peer)
        if (compareKeys(key, bestKey) < 0) [best, bestKey] = [peer, key]
      }
      listed.push({ modelID, ownedBy: `peer:${best.nodeID}`, loaded: true })
    }
    return listed
  }

  async * #failover (candidates: PeerInfo[], request: RoutedRequest, options: RouteOptions, attempt: { servedBy: ServedBy }, keys: ConversationKeys | null): AsyncGenerator<InferenceEvent, void, undefined> {
    const failures: string[] = []
    let lastError: unknown = null
    let allBusy = true
    // Billed once for the request, whichever peer answers: what it costs at the best peer is held before any peer is
    // asked. A dearer fallback is paid at its own price up to the balance: a requester who can afford the best peer is
    // never refused for a fallback it may not need.
    const charge = this.#deps.billing?.open({
      modelID: request.modelID,
      pricePer1kTokensMicro: candidates[0]?.record.pricePer1kTokensMicro ?? 0,
      maxTokens: request.kind === 'embeddings' ? null : request.maxTokens ?? null
    })
    let settled = false
    try {
      for (const peer of candidates) {
        options.signal?.throwIfAborted()
        attempt.servedBy = `peer:${peer.nodeID}`
        let started = false
        const billable = new BillableTokens(request)
        try {
          for await (const answered of this.#ask(peer, request, options)) {
            started = true
            let event = answered
            billable.add(event)
            if (event.type === 'done') {
              const usage = billable.usage(event)
              if (billableTokens(request.kind, usage) < billableTokens(request.kind, event.usage)) {
                this.#deps.log.warn({ nodeID: peer.nodeID, modelID: request.modelID, reported: event.usage, billed: usage }, 'peer reported more tokens than its answer can hold; billed what it can')
              }
              event = { ...event, usage }
              charge?.settle({ peerID: peer.nodeID, pricePer1kTokensMicro: peer.record.pricePer1kTokensMicro }, billableTokens(request.kind, usage))
              settled = true
              if (keys != null) this.#affinity.answered(keys, peer.nodeID)
            }
            yield event
          }
          return
        } catch (err) {
          if (options.signal?.aborted === true) throw options.signal.reason
          if (started) {
            this.#deps.log.warn({ err, nodeID: peer.nodeID, modelID: request.modelID }, 'peer failed mid-answer')
            throw new UnavailableError(`Peer ${peer.nodeID} failed while answering: ${(err as Error).message}`, { cause: err })
          }
          if (err instanceof RemoteInferenceError && err.kind === 'invalid') {
            // A prompt past the peer's context is one past this node's too: the client compacts on it
            if (err.overflow != null) throw new ContextOverflowError(err.message, err.param ?? 'messages', err.overflow)
            throw new InvalidInputError(err.message, err.param)
          }
          this.#deps.log.info({ nodeID: peer.nodeID, modelID: request.modelID, reason: (err as Error).message }, 'peer did not answer; trying the next')
          failures.push(`${peer.nodeID.slice(0, 16)}: ${(err as Error).message}`)
          lastError = err
          if (!(err instanceof RemoteInferenceError && err.kind === 'busy')) allBusy = false
        }
      }
    } finally {
      if (!settled) charge?.release()
    }
    if (allBusy && lastError instanceof RemoteInferenceError) {
      throw new BusyError(`Every peer serving ${request.modelID} is busy: ${failures.join('; ')}`, lastError.retryAfterSeconds ?? 1)
    }
    throw new UnavailableError(`No peer could serve ${request.modelID}: ${failures.join('; ')}`, { cause: lastError })
  }

  async * #ask (peer: PeerInfo, request: RoutedRequest, options: RouteOptions): AsyncGenerator<InferenceEvent, void, undefined> {
    const { modelID, ...asked } = request
    const ask: InferAsk = {
      modelID, request: asked, ptnID: options.ptnID ?? null,
      requester: options.requester == null ? null : requesterLabel(options.requester)
    }
    yield * requestInference(this.#deps.network, peer.nodeID, ask, { signal: options.signal, openTimeoutMs: this.#openTimeoutMs, answerDeadlineMs: this.#answerDeadlineMs })
  }
}

const LATENCY_STEP_MS = 20

type RankKey = [degraded: number, saturated: number, load: number, latencyMs: number, price: number]

function rankKey (peer: PeerInfo): RankKey {
  const { slots, busySlots, queued } = peer.record.capacity
  const load = slots === 0 ? Number.POSITIVE_INFINITY : (busySlots + queued) / slots
  return [
    peer.status === 'online' ? 0 : 1,
    saturated(peer) ? 1 : 0,
    // In quarters, so that latency and price decide between peers of about the same load.
    Math.round(load * 4),
    // In steps of LATENCY_STEP_MS: a few milliseconds of jitter do not outweigh a lower price.
    peer.latencyMs == null ? Number.POSITIVE_INFINITY : Math.floor(peer.latencyMs / LATENCY_STEP_MS),
    peer.record.pricePer1kTokensMicro
  ]
}

/**
 * Moves to the front of `candidates` (ranked) the peer that answered the longest prefix of this conversation recently,
 * unless it is saturated: then, as when it is no longer a candidate at all, the ranking alone decides. The others
 * follow in rank order, so a peer that stopped meanwhile costs a failover, not a turn.
 */
function preferAffine (candidates: PeerInfo[], affinity: ConversationAffinity, keys: ConversationKeys): void {
  const nodeID = affinity.peerFor(keys, (nodeID, answeredAt) => {
    const peer = candidates.find(candidate => candidate.nodeID === nodeID)
    // A record that arrived before the peer finished our last turn may still count that turn among its busy slots
    // (a peer re-advertises its load at most so often): that slot is ours, and free again.
    return peer != null && !saturated(peer, peer.lastSeen < answeredAt ? 1 : 0)
  })
  const index = nodeID == null ? -1 : candidates.findIndex(candidate => candidate.nodeID === nodeID)
  if (index > 0) candidates.unshift(...candidates.splice(index, 1))
}

/** Every slot of the peer's record is taken or spoken for by its queue, but for `freed` slots known to be free since. */
function saturated (peer: PeerInfo, freed = 0): boolean {
  const { slots, busySlots, queued } = peer.record.capacity
  return Math.max(0, busySlots - freed) + queued >= slots
}

function compareKeys (a: RankKey, b: RankKey): number {
  for (let i = 0; i < a.length; i++) {
    if (a[i] !== b[i]) return a[i] < b[i] ? -1 : 1
  }
  return 0
}

/** What a peer learns of whom we ask for: a label that tells our requesters apart and names none of them. */
function requesterLabel (requester: string): string {
  return createHash('sha256').update(requester).digest('base64url').slice(0, 22)
}
