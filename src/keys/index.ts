export { ApiKeys, maskKey, scopeOf, API_KEY_PREFIX, API_KEY_SCOPES } from './api-keys.ts'
export type { ApiKeyRecord, ApiKeyScope, GeneratedApiKey, Principal } from './api-keys.ts'
export { Sessions, SESSION_IDLE_MS, SESSION_MAX_AGE_MS, SIGN_IN_LINK_TTL_MS } from './sessions.ts'
export type { IssuedToken, SessionsDeps, SessionsOptions } from './sessions.ts'
