import type { Logger } from 'pino'
import { BusyError, UnavailableError } from '../errors.ts'
import type { ChatUsage, GenerateOptions, InferenceEvent, InferenceRequest } from '../inference/index.ts'

/** What a peer asks this node to generate: a request over the infer protocol, or an answer to an agent message. */
export interface PeerGeneration {
  /** The infer protocol's request kind (`chat`, `completion`, `embeddings`), or `agent` for a peer's agent message. For metrics, logs and billing. */
  kind: InferenceRequest['kind'] | 'agent'
  /** The peer asking, as its connection proves it. */
  nodeID: string
  /** The PTN the peer asks as, if it names one. */
  ptnID: string | null
  /** The peer's opaque label for whom it asks (its API key or owner, hashed), if it sends one. */
  requesterLabel: string | null
  /** The model it asks for; null for whatever this node serves (an agent answers with its loaded model). */
  modelID: string | null
  request: InferenceRequest
}

export interface ServingPolicyDeps {
  engine: {
    /** Any request, by kind (`LocalEngine.serve`). */
    serve (request: InferenceRequest, options: GenerateOptions): AsyncIterable<InferenceEvent>
    stats (): { slots: number }
    /** The model used most recently. */
    loaded (): { modelID: string } | null
    loadedModels (): ReadonlyArray<{ modelID: string }>
  }
  sameModel: (a: string, b: string) => boolean
  settings: { get (): { org_capacity_reservation: number, inference_backend: string } }
  /** The PTNs this node is a member of (`PtnService`). */
  ptn: { memberPtnIDs (): string[] }
  /** The PTNs each peer's certificates prove it a member of (`PeerNetwork`: checked when its record arrived). */
  peers: { peer (nodeID: string): { ptnIDs: string[] } | null }
  /** Counts a request for a model this node does not serve (demand-driven models). */
  recordDemand: (modelID: string) => void
  /** After a generation was answered in full: what it was, and the tokens it cost (metrics, billing). */
  onServed?: (served: { kind: PeerGeneration['kind'], nodeID: string, modelID: string, usage: ChatUsage }) => void
  log: Logger
}

/** Refused before any work: this node does not serve that model to peers now (not loaded, or `inference_backend` is peers). */
export class NotServedError extends UnavailableError {
  override name = 'NotServedError'
}

/** Refused before any work: every slot open to requesters outside this node's PTNs is taken. */
export class ReservedCapacityError extends BusyError {
  override name = 'ReservedCapacityError'
}

/**
 * Slots a request from outside this node's PTNs may use (`org_capacity_reservation` keeps that fraction of
 * the slots for PTN members): floor((1 - r) × slots).
 */
export function publicSlots (slots: number, reservation: number): number {
  return Math.max(0, Math.floor((1 - reservation) * slots + 1e-9))
}

/**
 * The one door from peers to the engine: every generation a peer asks for, a chat request or an agent message, passes
 * the same checks in the same order: `inference_backend` (a node set to `peers` serves nobody), the model (demand is
 * counted for one not served), `org_capacity_reservation` (outsiders get at most their share of the slots), then the
 * engine's own queue; and the same bookkeeping after (metrics). The generation runs for a requester named
 * `peer:<nodeID>` (or its PTN's, `ptn:<ptnID>`, between members), so that no prompt cache is shared with anyone else.
 */
export class ServingPolicy {
  readonly #deps: ServingPolicyDeps
  /** Generations for peers outside this node's PTNs, admitted and not yet finished. */
  #publicActive = 0

  constructor (deps: ServingPolicyDeps) {
    this.#deps = deps
  }

  /** Generations for outsiders admitted now (for tests and the record). */
  get publicActive (): number {
    return this.#publicActive
  }

  /** Slots this node keeps for its PTNs' members now: what its capability record advertises. */
  reservedSlots (): number {
    const slots = this.#deps.engine.stats().slots
    return slots - publicSlots(slots, this.#deps.settings.get().org_capacity_reservation)
  }

  /**
   * A peer's generation. Its first `next()` admits it or refuses it before any work (NotServedError,
   * ReservedCapacityError, then the engine's own QueueFullError or InvalidGenerationRequestError); its admission ends
   * when the events end, however they end.
   */
  async * generate (ask: PeerGeneration, options: { signal?: AbortSignal } = {}): AsyncGenerator<InferenceEvent, void, undefined> {
    const { modelID, member } = this.#admit(ask)
    if (!member) this.#publicActive++
    try {
      for await (const event of this.#deps.engine.serve(ask.request, { signal: options.signal, requester: this.#requester(ask), modelID })) {
        if (event.type === 'done') this.#deps.onServed?.({ kind: ask.kind, nodeID: ask.nodeID, modelID, usage: event.usage })
        yield event
      }
    } finally {
      if (!member) this.#publicActive--
    }
  }

  /**
   * Whose prompt cache the generation may reuse (the engine's `requester`): its PTN's, when both nodes are members of
   * the PTN it names; else its own peer's, and within that its own label's.
   */
  #requester (ask: PeerGeneration): string {
    if (ask.ptnID != null && this.#sharedPtnIDs(ask.nodeID).includes(ask.ptnID)) return `ptn:${ask.ptnID}`
    return ask.requesterLabel == null ? `peer:${ask.nodeID}` : `peer:${ask.nodeID}/${ask.requesterLabel}`
  }

  /** The PTNs both this node and the peer are verified members of. */
  #sharedPtnIDs (nodeID: string): string[] {
    const theirs = this.#deps.peers.peer(nodeID)?.ptnIDs ?? []
    if (theirs.length === 0) return []
    const ours = this.#deps.ptn.memberPtnIDs()
    return theirs.filter(id => ours.includes(id))
  }

  #admit (ask: PeerGeneration): { modelID: string, member: boolean } {
    const settings = this.#deps.settings.get()
    // Any model loaded here serves a peer's ask that names it; one that names none runs on the model used last
    const wanted = ask.modelID
    const loaded = wanted == null ? this.#deps.engine.loaded() : this.#deps.engine.loadedModels().find((model) => this.#deps.sameModel(model.modelID, wanted)) ?? null
    const refusal = settings.inference_backend === 'peers'
      ? 'this node runs no inference for peers (inference_backend is peers)'
      : this.#deps.engine.loaded() == null ? 'this node has no model loaded' : null
    if (refusal != null || loaded == null) {
      if (ask.modelID != null) this.#deps.recordDemand(ask.modelID)
      throw new NotServedError(ask.modelID == null ? capitalized(refusal ?? 'this node has no model loaded') : `Model ${ask.modelID} is not served by this node${refusal == null ? '' : `: ${refusal}`}`)
    }
    // A verified member of one of this node's PTNs may use the reserved slots.
    const member = this.#sharedPtnIDs(ask.nodeID).length > 0
    // With nothing reserved there is nothing to keep outsiders from: they queue at the engine like anyone else. With a
    // reservation, an outsider's generation counts against its share while it waits too, or outsiders queued ahead
    // would hold every slot as it frees up.
    if (!member && settings.org_capacity_reservation > 0) {
      const open = publicSlots(this.#deps.engine.stats().slots, settings.org_capacity_reservation)
      if (this.#publicActive >= open) {
        throw new ReservedCapacityError(`All ${open} of this node's slots open to requests from outside its PTNs are in use`, 1)
      }
    }
    return { modelID: loaded.modelID, member }
  }
}

function capitalized (text: string): string {
  return text.charAt(0).toUpperCase() + text.slice(1)
}
