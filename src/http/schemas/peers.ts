import { z } from 'zod'
import { IsoTime } from './common.ts'

/** A peer as `GET /v1/app/peers` lists it. */
export const PeerEntry = z.object({
  nodeID: z.string(),
  name: z.string(),
  type: z.enum(['lan', 'wan']).describe('lan: admitted to the LAN cluster (mDNS, passcode); wan: met through the relay'),
  models: z.array(z.string()).describe('every model the peer has: loaded and downloaded'),
  model: z.string().nullable().describe('the model it serves now'),
  hardware: z.object({ cpu: z.string(), memoryGB: z.number(), gpu: z.string().nullable() }),
  latencyMs: z.number().nullable().describe('round trip of the last ping; null until one answered'),
  status: z.enum(['online', 'degraded']),
  connection: z.enum(['direct', 'relayed']).describe('an addition: relayed while every connection to the peer goes through a relay (NAT not yet, or not, hole-punched)'),
  lastSeen: IsoTime,
  ptnIDs: z.array(z.string()).describe('PTNs its certificates prove it a member of'),
  pricePer1kTokens: z.number().describe('credits per 1000 generated tokens'),
  capacity: z.object({ slots: z.number(), busySlots: z.number(), queued: z.number() }).describe('an addition: its load as last advertised'),
  connected: z.boolean().describe('an addition: whether this node holds a connection to it; false for a node known by its gossiped advert, reached on demand')
})
export type PeerEntry = z.infer<typeof PeerEntry>

export const PeerList = z.object({ peers: z.array(PeerEntry) })
export type PeerList = z.infer<typeof PeerList>
