import { randomBytes } from 'node:crypto'
import { mkdirSync } from 'node:fs'
import { isAbsolute, join } from 'node:path'
import type { Logger } from 'pino'
import { ADMIN_TOKEN_FILE, DASHBOARD_DIR, VERSION, type NodeConfig } from './config.ts'
import { InvalidInputError } from './errors.ts'
import { buildHttpApp } from './http/app.ts'
import { NetworkListener, readTlsCredentials } from './http/network-listener.ts'
import { drainConnections, ensurePortFree } from './http/connections.ts'
import { isLoopbackAddress } from './http/guards.ts'
import type { HttpApp } from './http/types.ts'
import { openNodeIdentity, type NodeIdentity } from './identity/index.ts'
import { ApiKeys, Sessions } from './keys/index.ts'
import { Accelerator, LocalEngine, LocalRouter, aliasedRouter, aliasedTokenizer, defaultInferenceThreads, planGpu, v8Patches, warnInactivePatches, type LoadedModelState, type LocalModel, type LocalModels } from './inference/index.ts'
import { createLogger } from './log.ts'
import { MetricsRegistry } from './metrics/index.ts'
import { DemandDrivenModels, DemandTracker, ModelAliases, ModelStore, sameModel, type ModelRecord } from './models/index.ts'
import { MAX_ADVERTISED_CERTIFICATES, PeerNetwork, type RecordPart } from './network/index.ts'
import { PtnService } from './ptn/index.ts'
import { INFER_PROTOCOL, INFER_PROTOCOL_CHAT, INFER_PROTOCOL_REASONING, MAX_INBOUND_INFER_STREAMS, PeerRouter, createInferHandler } from './remote/index.ts'
import { ServingPolicy } from './serving/index.ts'
import { AgentService } from './agent/index.ts'
import { StoredResponses } from './responses/index.ts'
import { SettingsStore } from './settings/index.ts'
import { lockDataDir, openDatabase, writeFileAtomic, type Database } from './store/index.ts'
import { availableParallelism } from 'node:os'
import { detectHardware } from './system/hardware.ts'
import { KeepAwake } from './system/keep-awake.ts'
import { Ledger, SolanaWallet, Wallet, billableTokens, microToCredits, pricePer1kTokensMicro } from './wallet/index.ts'

const DATABASE_FILE = 'meshnode.db'
/** How often `lastUsed` of API keys and models is written: often enough to be useful, never per request. */
const USAGE_FLUSH_MS = 10_000

export interface RunningNode {
  readonly identity: NodeIdentity
  readonly http: HttpApp
  readonly db: Database
  readonly log: Logger
  /** Base URL of the HTTP API, e.g. http://127.0.0.1:11435 */
  readonly url: string
  readonly port: number
  readonly adminToken: string
  readonly engine: LocalEngine
  /** Catalog, downloads, load/unload of the engine's model. */
  readonly models: ModelStore
  /** The peer network: libp2p host, WAN and LAN presence, peer table; other domains `handle` and `open` protocols on it. */
  readonly network: PeerNetwork
  /** Where the API listens on the network now (`host:port`; none while network access is off). */
  networkAddresses (): string[]
  /** Requests nobody here could serve, per model (advertised to peers). */
  readonly demand: DemandTracker
  /** Stops accepting requests, finishes the ones in flight, stops every part and closes the database. */
  close (): Promise<void>
}

/** The composition root: builds every part of the node from its config, wires them, and starts listening. */
export async function startNode (config: NodeConfig, options: { logDestination?: NodeJS.WritableStream } = {}): Promise<RunningNode> {
  const log = createLogger(config.logLevel, options.logDestination, config.logFormat)
  // TLS is for keys that cross a network: the network listeners speak it, the loopback listener stays plain HTTP.
  if (config.tls != null && !(isLoopbackAddress(config.host) || config.host === 'localhost')) {
    throw new InvalidInputError(`--tls-cert applies to the network listeners: keep --host on loopback (not ${config.host}) and choose the network address with --network-host`)
  }
  const tls = config.tls == null ? null : readTlsCredentials(config.tls)
  mkdirSync(config.dataDir, { recursive: true, mode: 0o700 })
  // A start that cannot run fails here, before it touches the data dir's files or the network: another node holds the
  // directory, or the port is taken.
  const unlock = lockDataDir(config.dataDir)
  const cleanups: Array<() => Promise<void> | void> = [unlock]
  const ptnDir = join(config.dataDir, 'ptn')
  let identity: NodeIdentity
  let db: Database
  try {
    if (config.port !== 0) await ensurePortFree(config.host, config.port)
    // Refuses to start when the key or the database is missing beside the other, never replacing either.
    ;({ identity, db } = openNodeIdentity({ openDatabase: () => openDatabase(join(config.dataDir, DATABASE_FILE)), log }, {
      dataDir: config.dataDir, databaseFile: DATABASE_FILE, ptnDir, resetIdentity: config.resetIdentity
    }))
  } catch (err) {
    unlock()
    throw err
  }
  cleanups.unshift(() => { db.close() })
  try {
    const adminToken = randomBytes(32).toString('base64url')
    writeFileAtomic(join(config.dataDir, ADMIN_TOKEN_FILE), adminToken + '\n', 0o600)

    const startedAt = Date.now()
    const uptimeSeconds = (): number => Math.round((Date.now() - startedAt) / 1000)
    const name = config.name ?? `meshnode-${identity.nodeID.slice(0, 8)}`
    const hardware = detectHardware()
    const metrics = new MetricsRegistry()
    const settings = new SettingsStore({ db })
    const keys = new ApiKeys({ db }, { adminToken })
    const sessions = new Sessions({ keys })
    const keepAwake = new KeepAwake({ log: log.child({ part: 'keep-awake' }) })
    // The llama.cpp build, chosen before anything loads; a named backend that is not installed stops the start
    const threads = config.threads ?? defaultInferenceThreads(availableParallelism())
    const gpuChoice = config.gpu ?? 'auto'
    const accelerator = new Accelerator(planGpu(gpuChoice, join(config.dataDir, 'gpu'), hardware.gpu), { log: log.child({ part: 'gpu' }) })
    warnInactivePatches(log, v8Patches()) // node-llama-cpp's patches are reported by the accelerator, once llama.cpp starts
    if (gpuChoice !== 'auto' && gpuChoice !== 'off') await accelerator.llama(threads) // a named backend must start, or the node does not
    const engine = new LocalEngine({ log: log.child({ part: 'engine' }), accelerator }, {
      threads,
      slots: config.slots,
      queueSize: config.queueSize,
      contextSize: config.contextSize,
      flashAttention: config.flashAttention,
      maxLoadedModels: config.maxLoadedModels,
      keepAliveMs: config.keepAliveMs,
      memoryBudgetBytes: config.memoryBudgetBytes ?? undefined,
      prefixStateDir: join(config.dataDir, 'prefix-states'),
      prefixStateBudgetBytes: config.prefixStateBudgetBytes
    })
    cleanups.unshift(() => engine.close())
    const models = new ModelStore({ db, engine, settings, log: log.child({ part: 'models' }) },
      { dir: join(config.dataDir, 'models'), hubUrl: config.hfEndpoint, token: config.hfToken, diskHeadroomBytes: config.diskHeadroomBytes })
    cleanups.unshift(() => models.close()) // downloads pause (their .part stays) before the engine and database go
    // serve --model: a path is imported now, an id checked now, so that a wrong one fails the start; loaded once listening
    const startModel = config.model == null ? null : isAbsolute(config.model) ? (await models.import(config.model)).modelID : models.get(config.model).modelID
    modelGauges(metrics, engine, models)
    // A request for a model downloaded here loads it beside the others (evicting an idle one loaded for a request).
    const localRouter = new LocalRouter({ engine, sameModel, models: localModels(models) })

    // Requests nobody here could serve, counted by the router and the serving policy, advertised to
    // peers, and weighed by demand-driven models.
    const demand = new DemandTracker()

    // Started once the HTTP app is built; stopped after it has closed (requests in flight may be on peers). Each domain
    // below contributes its part of the capability record once it is built.
    const { demand: demandOptions, ...networkOptions } = config.network ?? {}
    const network = new PeerNetwork({ identity, settings, log: log.child({ part: 'network' }), name, hardware }, { ...networkOptions, listen: config.p2pListen ?? undefined })
    cleanups.unshift(() => network.stop())
    network.advertise('models', () => ({
      loaded: engine.loaded()?.modelID ?? null,
      allLoaded: engine.loadedModels().map(m => m.modelID),
      downloaded: models.list().filter(m => m.status === 'downloaded' || m.status === 'loaded').map(m => m.modelID)
    }))
    // A part of the record is read again when what it is made of changes, named by the events below each part; what
    // changes with no event (an imported file, demand decaying, a certificate expiring) waits for the record's safety
    // timer (RecordAdvertiser).
    const recordChanged = (...parts: RecordPart[]) => () => { network.recordChanged(...parts) }
    engine.on('loaded', recordChanged('models', 'pricePer1kTokensMicro', 'capacity'))
    engine.on('unloaded', recordChanged('models', 'pricePer1kTokensMicro', 'capacity'))
    for (const event of ['download.started', 'download.completed', 'download.failed', 'model.evicted'] as const) models.events.on(event, recordChanged('models'))
    network.advertise('demand', () => demand.list())
    demand.onRecord(recordChanged('demand'))
    // Demand-driven models (auto_manage_models): fetch and swap to the model peers and users ask for and nobody serves.
    const demandModels = new DemandDrivenModels({ demand, network, models, engine, settings, sameModel, log: log.child({ part: 'demand' }) }, demandOptions)
    cleanups.unshift(() => demandModels.stop())
    // Credits. The wallet pays peers for what they generate for us and delivers its transfers until acknowledged.
    const ledger = new Ledger({ db })
    const wallet = new Wallet({ ledger, identity, network, log: log.child({ part: 'wallet' }) })
    cleanups.unshift(() => wallet.stop())
    // A transfer goes out again when its payee comes online and at its own backoff; never on a record update.
    network.on('peer:online', (peer) => { wallet.peerOnline(peer.nodeID) })
    // The loaded model's price, from its size and this node's electricity settings (docs/API.md, Wallet).
    network.advertise('pricePer1kTokensMicro', () => pricePer1kTokensMicro({ sizeBytes: engine.loaded()?.sizeBytes ?? null, quantization: null, parameters: null }, settings.get()))
    settings.onChange(recordChanged('pricePer1kTokensMicro', 'capacity')) // electricity prices, org_capacity_reservation
    const solana = new SolanaWallet({ identity, rpcUrl: () => settings.get().solana_rpc_url, log: log.child({ part: 'solana' }) })
    // Requests for a model this node has not loaded go to the best peer that serves it; peers' requests
    // for our loaded model run here, with org_capacity_reservation of the slots kept for our PTNs' members.
    const peerRequests = metrics.counter('meshnode_peer_requests_served_total', 'Generations for peers answered in full: chat requests and agent messages')
    const peerTokens = metrics.counter('meshnode_peer_tokens_generated_total', 'Tokens billed to peers: those generated, or an embeddings request\'s input')
    const router = new PeerRouter({
      local: localRouter, network, demand, settings, sameModel, log: log.child({ part: 'router' }),
      billing: { open: (request) => wallet.openInferenceCharge(request) }
    })
    // Names clients insist on, standing for a model this node or a peer serves (the HTTP API resolves them)
    const aliases = new ModelAliases({ db, known: (modelID) => router.models().some((model) => sameModel(model.modelID, modelID)) })
    const ptn = new PtnService({ db, identity, peers: network, log: log.child({ part: 'ptn' }) }, { dir: ptnDir })
    await ptn.start()   // registers the PTN protocol, served once the network starts
    // This node's PTN certificates go out in its record; a peer's count only once verified against their ptnID.
    // A record carries at most MAX_ADVERTISED_CERTIFICATES; a node in more PTNs presents the ones its peers use.
    network.advertise('ptnCertificates', () => ptn.certificatesForAdvert(MAX_ADVERTISED_CERTIFICATES))
    ptn.onMembershipChange(recordChanged('ptnCertificates'))
    // which of them a full record carries first follows the PTNs of the peers connected
    for (const event of ['peer:online', 'peer:updated', 'peer:offline'] as const) network.on(event, recordChanged('ptnCertificates'))
    network.trustPtnCertificates((nodeID, certificates) => ptn.verifiedPtnIDs(nodeID, certificates))
    // The one door from peers to the engine. Chat requests over the infer protocol and agent messages pass
    // the same checks (inference_backend, org_capacity_reservation, queue) and the same bookkeeping (metrics, demand).
    const serving = new ServingPolicy({
      engine,
      sameModel,
      settings,
      ptn,
      peers: network,
      recordDemand: (modelID) => { demand.record(modelID) },
      onServed: ({ kind, usage }) => { peerTokens.inc({}, billableTokens(kind, usage)); peerRequests.inc() },
      log: log.child({ part: 'serving' })
    })
    // 1.2.0 carries thoughts, 1.1.0 tools, logit_bias, completions and embeddings; 1.0.0 (plain chats) is still what
    // older peers ask with. One handler reads them all.
    const infer = createInferHandler({ policy: serving, log: log.child({ part: 'infer' }) })
    for (const protocol of [INFER_PROTOCOL_REASONING, INFER_PROTOCOL, INFER_PROTOCOL_CHAT]) await network.handle(protocol, infer, { maxInboundStreams: MAX_INBOUND_INFER_STREAMS })
    network.advertise('capacity', () => {
      const { slots, busySlots, queued } = engine.stats()
      return { slots, busySlots, queued, reservedSlots: serving.reservedSlots() }
    })
    engine.on('stats', recordChanged('capacity'))
    // This node's agent answers peers' agents with the loaded model; conversations are kept on both nodes.
    const agent = new AgentService({ db, identity, network, engine, serving, name, log: log.child({ part: 'agent' }) }, config.agent)
    await agent.start()   // registers the agent protocol, served once the network starts
    // The agent's name and capabilities; peers build their agent directory from the records they verified.
    network.advertise('agent', () => agent.advertisedProfile())
    agent.onProfileChange(recordChanged('agent'))
    cleanups.unshift(() => { agent.stop() })

    keepAwake.set(settings.get().keep_awake)
    settings.onChange(({ changed, current }) => {
      if (changed.includes('keep_awake')) keepAwake.set(current.keep_awake)
    })
    cleanups.unshift(() => { keepAwake.set(false) })

    const flushUsage = setInterval(() => { keys.flushUsage(); models.flushUsage() }, USAGE_FLUSH_MS)
    flushUsage.unref()
    cleanups.unshift(() => { clearInterval(flushUsage); keys.flushUsage() }) // models flush their own in close()

    let port = config.port
    const http = await buildHttpApp({
      log,
      settings,
      keys,
      sessions,
      metrics,
      router: aliasedRouter(router, aliases, sameModel),
      tokenizer: aliasedTokenizer(localRouter, aliases),
      aliases,
      responses: new StoredResponses({ db }),
      sameModel,
      peers: { network },
      models,
      onServed: (modelID) => { models.touch(modelID) },
      wallet: { wallet, solana },
      events: { ledger, network },
      ptn,
      agent,
      dashboardDir: DASHBOARD_DIR,
      health: () => ({ status: 'ok', version: VERSION, nodeID: identity.nodeID, uptimeSeconds: uptimeSeconds() }),
      snapshot: () => ({
        node: { nodeID: identity.nodeID, name, version: VERSION, port, uptimeSeconds: uptimeSeconds() },
        hardware: { ...hardware, gpu: { ...accelerator.status(), detected: hardware.gpu } },
        keepAwake: keepAwake.status(),
        model: models.loadedModel(),
        models: models.list(),
        peers: network.counts(),
        network: network.reachability(),
        wallet: { currentBalance: microToCredits(ledger.balanceMicro()) },
        ptn: { memberships: ptn.countInEffect() },
        settings: settings.redacted()
      })
    }, { version: VERSION, allowedOrigins: config.allowedOrigins, allowedHosts: config.allowedHosts, limits: config.http })
    // With allow_network_access on, the API also listens on the network (every non-loopback address, or
    // --network-host), at once; off, on loopback only again.
    const networkListener = new NetworkListener({ createServer: () => http.createListener(tls), log: log.child({ part: 'listener' }) },
      { port: () => port, host: config.networkHost, primaryHost: config.host })
    const stopFollowingAccess = settings.onChange(({ changed, current }) => {
      if (!changed.includes('allow_network_access')) return
      const switched = current.allow_network_access ? networkListener.open() : networkListener.close()
      switched.catch((err: unknown) => { log.error({ err }, 'network access: the network listener could not follow the setting') })
    })
    cleanups.unshift(async () => {
      stopFollowingAccess()
      // Requests in flight may finish, but not forever: a long generation or agent exchange is cut after the grace
      // period so that a SIGTERM always ends in a clean database close.
      const drained = drainConnections(http.server, config.shutdownGraceMs)
      try {
        await Promise.all([http.close(), networkListener.close({ graceMs: config.shutdownGraceMs })])
      } finally {
        drained()
      }
    })
    await network.start()
    demandModels.start()
    await wallet.start()

    await http.listen({ host: config.host, port: config.port })
    const address = http.server.address()
    port = typeof address === 'object' && address != null ? address.port : config.port
    const urlHost = config.host.includes(':') ? `[${config.host}]` : config.host
    if (settings.get().allow_network_access) await networkListener.open()
    log.info({ nodeID: identity.nodeID, port, dataDir: config.dataDir, network: networkListener.addresses() }, 'meshnode is listening')
    models.resumeInterrupted() // in the background: downloads stopped by the last shutdown go on from their .part
    if (accelerator.backend() == null) {
      // --gpu auto with GPU binaries installed: find out now which one works, so /v1/app says so before a first load
      const warming = accelerator.llama(threads).then(() => undefined, (err: unknown) => { log.warn({ err }, 'llama.cpp did not start') })
      cleanups.unshift(async () => { await warming })
    }
    if (startModel == null) models.reloadLast()
    else models.loadInBackground(startModel)

    let closing: Promise<void> | null = null
    return {
      identity,
      http,
      db,
      log,
      url: `http://${urlHost === '0.0.0.0' ? '127.0.0.1' : urlHost}:${port}`,
      port,
      adminToken,
      engine,
      models,
      network,
      networkAddresses: () => networkListener.addresses(),
      demand,
      close: () => (closing ??= runCleanups(cleanups, log))
    }
  } catch (err) {
    await runCleanups(cleanups, log)
    throw err
  }
}

/**
 * The gauges of GET /metrics that show what the models do: each loaded model's slots, busy slots and queue, and each
 * running download's bytes. Read from the engine and the model store when scraped, never pushed per request or chunk.
 */
function modelGauges (metrics: MetricsRegistry, engine: LocalEngine, models: ModelStore): void {
  const loaded = (value: (model: LoadedModelState) => number) => () =>
    engine.loadedModels().map((model) => ({ labels: { model: model.modelID, kind: model.kind }, value: value(model) }))
  metrics.gauge('meshnode_model_slots', 'Generation slots of each loaded model (none for an embedding model)', ['model', 'kind'], loaded((m) => m.slots))
  metrics.gauge('meshnode_model_busy_slots', 'Slots of each loaded model generating now', ['model', 'kind'], loaded((m) => m.busySlots))
  metrics.gauge('meshnode_model_queued_requests', 'Requests waiting for a slot of each loaded model', ['model', 'kind'], loaded((m) => m.queued))
  const downloading = (): ModelRecord[] => models.list().filter((m) => m.status === 'downloading')
  metrics.gauge('meshnode_model_downloads_active', 'Model downloads running', [], () => downloading().length)
  metrics.gauge('meshnode_model_download_received_bytes', 'Bytes of each running download on disk so far', ['model'], () =>
    downloading().map((m) => ({ labels: { model: m.modelID }, value: m.progress?.receivedBytes ?? 0 })))
  metrics.gauge('meshnode_model_download_size_bytes', 'Size of the file each running download fetches, once the hub has told it', ['model'], () =>
    downloading().flatMap((m) => m.progress?.totalBytes == null ? [] : [{ labels: { model: m.modelID }, value: m.progress.totalBytes }]))
}

/** The models on this node's disk, as the local router sees them. */
function localModels (models: ModelStore): LocalModels {
  const asLocal = (record: ModelRecord): LocalModel | null => record.status === 'available'
    ? null
    : { modelID: record.modelID, status: record.status, fraction: record.progress?.fraction ?? null }
  return {
    find: (modelID) => {
      const record = models.list().find(m => m.status !== 'available' && sameModel(m.modelID, modelID))
      return record == null ? null : asLocal(record)
    },
    loadable: () => models.list().filter(m => m.status === 'downloaded' || m.status === 'loaded').map(asLocal).filter(m => m != null),
    load: async (modelID) => { await models.load(modelID, { reason: 'request' }) }
  }
}

/** Runs shutdown steps newest first; one failing step is logged and does not keep the database open. */
async function runCleanups (cleanups: Array<() => Promise<void> | void>, log: Logger): Promise<void> {
  for (const cleanup of cleanups) {
    try {
      await cleanup()
    } catch (err) {
      log.error({ err }, 'shutdown step failed')
    }
  }
}
