// The events the models domain sends (GET /v1/app/events relays them), each carrying the model's id.
import type { ModelProgress } from './records.ts'

export interface ModelEventMap {
  'download.started': [{ modelID: string, totalBytes: number | null }]
  'download.progress': [{ modelID: string } & ModelProgress]
  'download.verifying': [{ modelID: string }]
  'download.completed': [{ modelID: string, sizeBytes: number, sha256: string }]
  'download.failed': [{ modelID: string, error: string }]
  /** `reason`: `explicit` (a load call, `serve --model`, a reload at start) or `request` (a request named it). */
  'model.loaded': [{ modelID: string, contextLength: number, reason: 'explicit' | 'request' }]
  'model.load_failed': [{ modelID: string, error: string }]
  /** `reason`: `explicit` (an unload call), `evicted` (room for another), `idle` (past the keep-alive) or `closing`. */
  'model.unloaded': [{ modelID: string, reason: 'explicit' | 'evicted' | 'idle' | 'closing' }]
  'model.evicted': [{ modelID: string, sizeBytes: number }]
}
export type ModelEventType = keyof ModelEventMap
export const MODEL_EVENT_TYPES: readonly ModelEventType[] = [
  'download.started', 'download.progress', 'download.verifying', 'download.completed', 'download.failed',
  'model.loaded', 'model.load_failed', 'model.unloaded', 'model.evicted'
]
