import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod'
import { loadedModelsOf, type PeerInfo } from '../../network/index.ts'
import { microToCredits } from '../../wallet/index.ts'
import { errorResponses } from '../schemas/common.ts'
import { PeerList, type PeerEntry } from '../schemas/peers.ts'

export interface PeersRoutesOptions {
  network: { peers (): PeerInfo[] }
}

export const peersRoutes: FastifyPluginAsyncZod<PeersRoutesOptions> = async (app, { network }) => {
  app.get('/v1/app/peers', { schema: { summary: 'Peers on the LAN and the WAN', tags: ['peers'], response: { 200: PeerList, ...errorResponses } } }, async () => {
    return { peers: network.peers().map(toPeerEntry) }
  })
}

function toPeerEntry (peer: PeerInfo): PeerEntry {
  const { record } = peer
  const models = [...new Set([...loadedModelsOf(record), ...record.models.downloaded])]
  return {
    nodeID: peer.nodeID,
    name: record.name,
    type: peer.type,
    models,
    model: record.models.loaded,
    hardware: { cpu: record.hardware.cpu, memoryGB: record.hardware.memoryGB, gpu: record.hardware.gpu },
    latencyMs: peer.latencyMs,
    status: peer.status,
    connection: peer.connection,
    lastSeen: new Date(peer.lastSeen).toISOString(),
    ptnIDs: peer.ptnIDs,
    pricePer1kTokens: microToCredits(record.pricePer1kTokensMicro),
    capacity: { slots: record.capacity.slots, busySlots: record.capacity.busySlots, queued: record.capacity.queued },
    connected: peer.connected
  }
}
