import { z } from 'zod'
import { REACHABILITY } from '../../network/index.ts'
import { SettingsObject } from './settings.ts'

export const Health = z.object({
  status: z.literal('ok'),
  version: z.string(),
  nodeID: z.string(),
  uptimeSeconds: z.number()
})
export type Health = z.infer<typeof Health>

export const DownloadProgress = z.object({
  receivedBytes: z.number(),
  totalBytes: z.number().nullable(),
  fraction: z.number().nullable(),
  bytesPerSecond: z.number().nullable(),
  etaSeconds: z.number().nullable(),
  message: z.string().nullable().describe('why no bytes flow now, e.g. "rate limited, resuming in 55 s"; null while they do')
})

/** What a loaded model is doing: an addition, as a node holds several models at once. */
export const LoadedState = z.object({
  kind: z.enum(['chat', 'embedding']).describe('embedding: a model that only embeds (refused for chat and completions)'),
  memoryBytes: z.number().describe("node-llama-cpp's estimate of the model and its context, RAM and VRAM together"),
  contextLength: z.number(),
  slots: z.number().describe('generations it runs at once (0 for an embedding model)'),
  busySlots: z.number(),
  queued: z.number(),
  loadedBy: z.enum(['explicit', 'request']).describe('explicit: stays until unloaded; request: evicted first when room is needed, unloaded after the keep-alive'),
  idleSeconds: z.number().describe('since its last request settled; 0 while one runs')
})

/** A model as listings show it. */
export const ModelRecord = z.object({
  modelID: z.string(),
  name: z.string(),
  family: z.string().nullable(),
  parameters: z.string().nullable(),
  quantization: z.string().nullable(),
  sizeBytes: z.number().nullable(),
  contextLength: z.number().nullable(),
  status: z.enum(['available', 'downloading', 'downloaded', 'loaded', 'failed']),
  progress: DownloadProgress.nullable(),
  error: z.string().nullable(),
  source: z.string(),
  loaded: LoadedState.nullable().describe('while status is loaded: what it is doing; null otherwise')
})
export type ModelRecord = z.infer<typeof ModelRecord>

export const AppSnapshot = z.object({
  node: z.object({
    nodeID: z.string(),
    name: z.string(),
    version: z.string(),
    port: z.number(),
    uptimeSeconds: z.number()
  }),
  hardware: z.object({
    cpu: z.string(),
    cores: z.number(),
    memoryGB: z.number(),
    /** What llama.cpp runs on: the backend asked for and used, its devices and VRAM, or why the CPU. */
    gpu: z.object({
      requested: z.enum(['auto', 'cuda', 'vulkan', 'metal', 'off']),
      backend: z.enum(['cuda', 'vulkan', 'metal', 'cpu']).nullable(),
      devices: z.array(z.string()),
      vramTotalBytes: z.number().nullable(),
      vramFreeBytes: z.number().nullable(),
      reason: z.string().nullable(),
      /** A GPU the operating system shows (NVIDIA's driver; an AMD or Intel display device on Linux), used or not. */
      detected: z.string().nullable()
    })
  }),
  keepAwake: z.object({
    active: z.boolean(),
    method: z.string().nullable(),
    reason: z.string().nullable()
  }),
  model: z.object({
    modelID: z.string(),
    status: z.string(),
    contextLength: z.number().nullable(),
    gpu: z.object({ backend: z.string(), gpuLayers: z.number(), totalLayers: z.number() }).nullable()
  }).nullable(),
  models: z.array(ModelRecord),
  peers: z.object({ lan: z.number(), wan: z.number() }),
  network: z.object({
    reachability: z.enum(REACHABILITY).describe('an addition: public once a peer has dialed this node back at a public address (AutoNAT), private once a dial-back to its public address failed (behind NAT), unknown before either'),
    publicAddrs: z.array(z.string()).describe('its public addresses a peer has dialed back; others reach it there directly')
  }),
  wallet: z.object({ currentBalance: z.number() }),
  ptn: z.object({ memberships: z.number() }),
  settings: SettingsObject
})
export type AppSnapshot = z.infer<typeof AppSnapshot>
