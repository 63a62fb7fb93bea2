// Many nodes in one process, the network layer only: each a real `PeerNetwork` (libp2p host, admission,
// peer table, record advertiser, WAN presence) with a static settings object and no engine, HTTP or database. What a
// node serves is a stand-in record part; a request is answered by a stand-in infer handler. For tests at N = 100 and
// the bench (bench/network-scale.ts).
import { EventEmitter } from 'node:events'
import { pino, type Logger } from 'pino'
import { generateSeed, identityFromSeed } from '../../src/identity/index.ts'
import { NotFoundError } from '../../src/errors.ts'
import { PeerNetwork, type PeerNetworkOptions } from '../../src/network/index.ts'
import { INFER_PROTOCOL, INFER_PROTOCOL_CHAT, INFER_PROTOCOL_REASONING, MAX_INBOUND_INFER_STREAMS, PeerRouter, createInferHandler } from '../../src/remote/index.ts'
import { sameModel } from '../../src/models/index.ts'
import { DEFAULT_SETTINGS, type Settings, type SettingsChange } from '../../src/settings/index.ts'

const HARDWARE = { cpu: 'stand-in', cores: 1, memoryGB: 1, gpu: null }

/** Settings that change only when a test says so. */
export class StaticSettings {
  #current: Settings
  readonly #events = new EventEmitter<{ change: [SettingsChange] }>()

  constructor (patch: Partial<Settings>) {
    this.#current = { ...DEFAULT_SETTINGS, ...patch }
  }

  get (): Settings {
    return this.#current
  }

  set (patch: Partial<Settings>): void {
    const previous = this.#current
    this.#current = { ...previous, ...patch }
    this.#events.emit('change', { previous, current: this.#current, changed: Object.keys(patch) as SettingsChange['changed'] })
  }

  onChange (listener: (change: SettingsChange) => void): () => void {
    this.#events.on('change', listener)
    return () => { this.#events.off('change', listener) }
  }
}

export interface LightNode {
  readonly nodeID: string
  readonly network: PeerNetwork
  readonly settings: StaticSettings
  /** The real router over this node's peers (no local engine: every request goes to a peer). */
  readonly router: PeerRouter
  /** The model this node advertises as loaded (null: none); set it to advertise another. */
  serve (modelID: string | null): void
  /** Asks the network for `modelID` through the router: the answer's text and who served it. */
  ask (modelID: string, content: string): Promise<{ text: string, servedBy: string }>
  stop (): Promise<void>
}

export interface LightNodeOptions {
  relayUrls: string[]
  network?: PeerNetworkOptions
  /** Direct listen addresses; [] for a node reachable only through relays. @default loopback TCP */
  listen?: string[]
  log?: Logger
}

/** A network-layer node with WAN on through `relayUrls`. */
export async function startLightNode (options: LightNodeOptions): Promise<LightNode> {
  const identity = identityFromSeed(generateSeed())
  const settings = new StaticSettings({ wan_enabled: true, wan_relay_url: options.relayUrls.join(',') })
  const network = new PeerNetwork({
    identity, settings, log: options.log ?? pino({ level: 'silent' }), name: `light-${identity.nodeID.slice(0, 6)}`, hardware: HARDWARE
  }, { listen: options.listen ?? ['/ip4/127.0.0.1/tcp/0'], ...options.network })
  let model: string | null = null
  network.advertise('models', () => ({ loaded: model, downloaded: model == null ? [] : [model] }))
  network.advertise('capacity', () => ({ slots: 1, busySlots: 0, queued: 0, reservedSlots: 0 }))
  // The stand-in engine: answers a chat on the model it serves with who it is, the way a real one streams.
  const infer = createInferHandler({
    policy: {
      async * generate (ask) {
        yield { type: 'delta', text: `served by ${identity.nodeID.slice(0, 8)}: ` }
        const { request } = ask
        if (request.kind === 'chat') yield { type: 'delta', text: request.messages.map(m => typeof m.content === 'string' ? m.content : '').join(' ') }
        yield { type: 'done', finishReason: 'stop', usage: { promptTokens: 1, completionTokens: 2, totalTokens: 3, cachedTokens: 0 } }
      }
    },
    log: options.log ?? pino({ level: 'silent' })
  })
  for (const protocol of [INFER_PROTOCOL_REASONING, INFER_PROTOCOL, INFER_PROTOCOL_CHAT]) await network.handle(protocol, infer, { maxInboundStreams: MAX_INBOUND_INFER_STREAMS })
  const router = new PeerRouter({
    local: {
      route: () => { throw new NotFoundError('no local engine') },
      models: () => [],
      serves: () => false,
      notServed: (modelID, peers = '') => new NotFoundError(`Model ${modelID} is not here${peers}`)
    },
    network,
    demand: { record: () => undefined },
    settings: { get: () => ({ inference_backend: 'llama.cpp' }) },
    sameModel,
    log: options.log ?? pino({ level: 'silent' })
  })
  await network.start()
  return {
    nodeID: identity.nodeID,
    network,
    settings,
    router,
    serve: (modelID) => {
      model = modelID
      network.recordChanged('models')
    },
    ask: async (modelID, content) => {
      const generation = router.route({ kind: 'chat', modelID, messages: [{ role: 'user', content }], maxTokens: 8 })
      let text = ''
      for await (const event of { [Symbol.asyncIterator]: () => generation.events }) if (event.type === 'delta') text += event.text
      return { text, servedBy: generation.servedBy }
    },
    stop: async () => { await network.stop() }
  }
}
