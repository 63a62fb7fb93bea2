// GET /v1/app/events: one server-sent event stream of what changes in the node, for the dashboard and the CLI.
import type { ServerResponse } from 'node:http'
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod'
import { z } from 'zod'
import { MODEL_EVENT_TYPES, type ModelStore } from '../../models/index.ts'
import type { PeerInfo, PeerNetwork } from '../../network/index.ts'
import type { SettingsStore } from '../../settings/index.ts'
import { microToCredits, type Ledger } from '../../wallet/index.ts'
import type { NodeEventData, NodeEventName } from '../schemas/events.ts'
import { errorResponses } from '../schemas/common.ts'
import { transactionBody } from '../schemas/wallet.ts'
import { keepAlive, startSse, writeSseComment, writeSseData } from '../sse.ts'

export interface EventsRoutesOptions {
  models: Pick<ModelStore, 'events'>
  settings: Pick<SettingsStore, 'onChange'>
  /** Absent only where a test builds the app without a node. */
  ledger?: Pick<Ledger, 'events'>
  network?: Pick<PeerNetwork, 'on' | 'off'>
}

type Emit = <E extends NodeEventName>(event: E, data: NodeEventData<E>) => void

/**
 * Each source is subscribed per stream, before the headers go out, so a client that sees the 200 and then acts
 * sees the events of what it did. There is no replay: a client reads the current state after subscribing.
 */
export const eventsRoutes: FastifyPluginAsyncZod<EventsRoutesOptions> = async (app, sources) => {
  const streams = new Set<ServerResponse>()
  app.addHook('preClose', async () => {
    // An open stream would keep the server from closing; ending it tells the client the node is going away
    for (const raw of streams) raw.end()
  })
  app.get('/v1/app/events', {
    schema: {
      summary: 'Node events as server-sent events: downloads, models, wallet, peers, settings',
      tags: ['events'],
      description: 'text/event-stream of download.*, model.*, wallet.*, peer.* and settings.* events; a comment every 15 s keeps it open',
      produces: ['text/event-stream'], // refusals (guards) still answer in the JSON envelope
      response: { 200: z.string().describe('text/event-stream'), ...errorResponses }
    }
  }, async (_request, reply) => {
    let raw: ServerResponse | null = null
    const emit: Emit = (event, data) => { if (raw != null) writeSseData(raw, data, event) }
    const unsubscribe = subscribe(sources, emit)
    raw = startSse(reply)
    const stream = raw
    streams.add(stream)
    writeSseComment(stream, 'connected')
    const stopKeepAlive = keepAlive(stream)
    stream.once('close', () => { // the client left, or preClose ended the stream
      stopKeepAlive()
      streams.delete(stream)
      unsubscribe()
    })
    return reply
  })
}

/** Subscribes `emit` to every source, shaping domain events into their wire form; returns the unsubscribe. */
function subscribe (sources: EventsRoutesOptions, emit: Emit): () => void {
  const undo: Array<() => void> = []
  for (const type of MODEL_EVENT_TYPES) {
    const listener = (data: NodeEventData<typeof type>): void => { emit(type, data) }
    sources.models.events.on(type, listener)
    undo.push(() => { sources.models.events.off(type, listener) })
  }
  undo.push(sources.settings.onChange(({ changed }) => { emit('settings.changed', { changed }) }))
  const ledger = sources.ledger
  if (ledger != null) {
    const listener = (transaction: Parameters<typeof transactionBody>[0], balanceMicro: number): void => {
      emit('wallet.transaction', { ...transactionBody(transaction), balance: microToCredits(balanceMicro) })
    }
    ledger.events.on('transaction', listener)
    undo.push(() => { ledger.events.off('transaction', listener) })
  }
  const network = sources.network
  if (network != null) {
    const online = (peer: PeerInfo): void => { emit('peer.online', { nodeID: peer.nodeID, name: peer.record.name, type: peer.type }) }
    const updated = (peer: PeerInfo): void => { emit('peer.updated', { nodeID: peer.nodeID, status: peer.status, latencyMs: peer.latencyMs }) }
    const offline = (nodeID: string): void => { emit('peer.offline', { nodeID }) }
    network.on('peer:online', online)
    network.on('peer:updated', updated)
    network.on('peer:offline', offline)
    undo.push(() => {
      network.off('peer:online', online)
      network.off('peer:updated', updated)
      network.off('peer:offline', offline)
    })
  }
  return () => { for (const step of undo) step() }
}
