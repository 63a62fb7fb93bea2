// The events of GET /v1/app/events (docs/API.md, Events): the model events, and what the dashboard shows live.
import { z } from 'zod'
import { ModelEvents } from './models.ts'
import { WalletTransaction } from './wallet.ts'

export const NodeEvents = {
  ...ModelEvents,
  'wallet.transaction': WalletTransaction.extend({ balance: z.number().describe('the balance after it') }),
  'peer.online': z.object({ nodeID: z.string(), name: z.string(), type: z.enum(['lan', 'wan']) }),
  'peer.updated': z.object({ nodeID: z.string(), status: z.enum(['online', 'degraded']), latencyMs: z.number().nullable() }),
  'peer.offline': z.object({ nodeID: z.string() }),
  // Names only: a value could be a secret (cluster_passcode), and the page reads the settings it shows anyway
  'settings.changed': z.object({ changed: z.array(z.string()) })
} as const
export type NodeEventName = keyof typeof NodeEvents
export type NodeEventData<E extends NodeEventName> = z.infer<(typeof NodeEvents)[E]>
