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
   );`,
  // wallet (issue 5): one balance row, the append-only transaction log, and every transfer in or out keyed by its
  // id, so that each is applied at most once on each side and an outgoing one is redelivered until acknowledged.
  `CREATE TABLE wallet_balance (
     id INTEGER PRIMARY KEY CHECK (id = 1),
     balance_micro INTEGER NOT NULL CHECK (balance_micro >= 0 AND balance_micro <= 9007199254740991)
   );
   INSERT INTO wallet_balance (id, balance_micro) VALUES (1, 0);
   CREATE TABLE wallet_transactions (
     seq INTEGER PRIMARY KEY AUTOINCREMENT,
     id TEXT NOT NULL UNIQUE,
     type TEXT NOT NULL CHECK (type IN ('earn', 'spend', 'grant')),
     amount_micro INTEGER NOT NULL CHECK (amount_micro > 0),
     peer_id TEXT,
     memo TEXT NOT NULL,
     timestamp TEXT NOT NULL
   );
   CREATE UNIQUE INDEX wallet_one_grant ON wallet_transactions (type) WHERE type = 'grant';
   CREATE TABLE wallet_transfers (
     id TEXT PRIMARY KEY,
     direction TEXT NOT NULL CHECK (direction IN ('outgoing', 'incoming')),
     peer_id TEXT NOT NULL,
     amount_micro INTEGER NOT NULL CHECK (amount_micro > 0),
     envelope TEXT NOT NULL,
     state TEXT NOT NULL CHECK (state IN ('pending', 'acknowledged', 'received')),
     attempts INTEGER NOT NULL DEFAULT 0,
     next_attempt_ms INTEGER NOT NULL DEFAULT 0,
     last_error TEXT,
     settled_at TEXT
   );
   CREATE INDEX wallet_transfers_pending ON wallet_transfers (next_attempt_ms) WHERE state = 'pending';`
]
