export { ApiKeys, maskKey, API_KEY_PREFIX } from './api-keys.ts'
export type { ApiKeyRecord, GeneratedApiKey, Principal } from './api-keys.ts'
