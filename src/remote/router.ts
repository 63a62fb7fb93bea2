import { createHash } from 'node:crypto'
import type { Logger } from 'pino'
import { BusyError, InvalidInputError, UnavailableError } from '../errors.ts'
import type { ChatRouter, InferenceEvent, LocalRouter, ModelListing, RoutedGeneration, RoutedRequest, RouteOptions, ServedBy } from '../inference/index.ts'
import { billableTokens, type InferenceCharge, type InferenceChargeRequest } from '../wallet/index.ts'
import type { PeerStreams } from '../wire/index.ts'
import { RemoteInferenceError, requestInference, type InferAsk } from './infer.ts'
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
}

/**
 * Places a request (a chat, a text completion, embeddings): on this node when its loaded model is the one named (and `inference_backend` is not
 * `peers`), else on the best peer that serves it, falling over to the next while no token has arrived. The answer
 * streams back as the same events the local engine gives; a failure after the first token ends the stream with it.
 */
export class PeerRouter implements ChatRouter {
  readonly #deps: PeerRouterDeps
  readonly #maxAttempts: number
  readonly #openTimeoutMs: number

  constructor (deps: PeerRouterDeps, options: PeerRouterOptions = {}) {
    this.#deps = deps
    this.#maxAttempts = options.maxAttempts ?? 3
    this.#openTimeoutMs = options.openTimeoutMs ?? 10_000
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
    const attempt = { servedBy: `peer:${candidates[0].nodeID}` as ServedBy }
    const events = this.#failover(candidates.slice(0, this.#maxAttempts), request, options, attempt)
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

  models (): ModelListing[] {
    const listed = this.#deps.settings.get().inference_backend === 'peers' ? [] : this.#deps.local.models()
    const seen = (modelID: string): boolean => listed.some(model => this.#deps.sameModel(model.modelID, modelID))
    for (const peer of this.#deps.network.peers()) {
      for (const loaded of loadedModelsOf(peer.record)) {
        if (seen(loaded)) continue
        const best = this.candidates(loaded)[0] ?? peer
        listed.push({ modelID: loaded, ownedBy: `peer:${best.nodeID}`, loaded: true })
      }
    }
    return listed
  }

  async * #failover (candidates: PeerInfo[], request: RoutedRequest, options: RouteOptions, attempt: { servedBy: ServedBy }): AsyncGenerator<InferenceEvent, void, undefined> {
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
        try {
          for await (const event of this.#ask(peer, request, options)) {
            started = true
            if (event.type === 'done') {
              charge?.settle({ peerID: peer.nodeID, pricePer1kTokensMicro: peer.record.pricePer1kTokensMicro }, billableTokens(request.kind, event.usage))
              settled = true
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
          if (err instanceof RemoteInferenceError && err.kind === 'invalid') throw new InvalidInputError(err.message, err.param)
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
    yield * requestInference(this.#deps.network, peer.nodeID, ask, { signal: options.signal, openTimeoutMs: this.#openTimeoutMs })
  }
}

const LATENCY_STEP_MS = 20

type RankKey = [degraded: number, saturated: number, load: number, latencyMs: number, price: number]

function rankKey (peer: PeerInfo): RankKey {
  const { slots, busySlots, queued } = peer.record.capacity
  const load = slots === 0 ? Number.POSITIVE_INFINITY : (busySlots + queued) / slots
  return [
    peer.status === 'online' ? 0 : 1,
    busySlots + queued < slots ? 0 : 1,
    // In quarters, so that latency and price decide between peers of about the same load.
    Math.round(load * 4),
    // In steps of LATENCY_STEP_MS: a few milliseconds of jitter do not outweigh a lower price.
    peer.latencyMs == null ? Number.POSITIVE_INFINITY : Math.floor(peer.latencyMs / LATENCY_STEP_MS),
    peer.record.pricePer1kTokensMicro
  ]
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
