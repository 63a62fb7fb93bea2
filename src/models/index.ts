export { ModelStore } from './model-store.ts'
export type { ModelStoreDeps, ModelStoreOptions } from './model-store.ts'
export type { ModelRecord, ModelStatus, ModelProgress } from './records.ts'
export type { LoadedModel, ModelEngine } from './model-loader.ts'
export { MODEL_EVENT_TYPES } from './events.ts'
export type { ModelEventMap, ModelEventType } from './events.ts'
export { BYTES_PER_GB, formatBytes } from './storage-budget.ts'
export { CATALOG, findCatalogEntry } from './catalog.ts'
export type { CatalogEntry } from './catalog.ts'
export { parseModelID, normaliseModelID, modelKey, sameModel, pickQuantFile, DEFAULT_QUANTS, MAX_MODEL_ID_LENGTH } from './model-id.ts'
export type { ModelRef } from './model-id.ts'
export { HubClient, DEFAULT_HUB_URL } from './hub.ts'
export type { HubClientOptions, HubFileMetadata } from './hub.ts'
export { downloadFile } from './download.ts'
export type { DownloadProgress, DownloadRequest, DownloadResult, DownloadOptions } from './download.ts'
export {
  DownloadFailedError, DownloadNotFoundError, DownloadTooLargeError, IntegrityError, InvalidModelIDError,
  ModelNotFoundError, ModelNotDownloadedError, StorageBudgetError, InsufficientDiskError, SameFileError
} from './errors.ts'
