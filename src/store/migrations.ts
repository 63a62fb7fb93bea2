// Versioned schema: migration N brings the database from version N to N+1. Never edit a released migration;
// append a new one. Money is INTEGER micro-credits, times are ISO 8601 UTC text.
export const MIGRATIONS: readonly string[] = [
  // 1: settings and API keys (the foundation issue).
  `CREATE TABLE settings (
     key TEXT PRIMARY KEY,
     value TEXT NOT NULL
   );
   CREATE TABLE api_keys (
     id TEXT PRIMARY KEY,
     name TEXT NOT NULL,
     hash TEXT NOT NULL UNIQUE,
     prefix TEXT NOT NULL,
     created TEXT NOT NULL,
     revoked_at TEXT
   );
   CREATE TABLE api_key_usage (
     id TEXT PRIMARY KEY REFERENCES api_keys (id),
     last_used TEXT NOT NULL
   );
   CREATE TABLE node_state (
     key TEXT PRIMARY KEY,
     value TEXT NOT NULL
   );`
]
