// Versioned schema: migration N brings the database from version N to N+1. Never edit a released migration;
// append a new one. Money is INTEGER micro-credits, times are ISO 8601 UTC text.
export const MIGRATIONS: readonly string[] = [
  // 1: settings and API keys.
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
  // wallet: one balance row, the append-only transaction log, and every transfer in or out keyed by its
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
   CREATE INDEX wallet_transfers_pending ON wallet_transfers (next_attempt_ms) WHERE state = 'pending';`,
  // PTN: this node's memberships with its certificates, the members it knows of in each PTN, and the
  // invite codes it has redeemed as an admin (single use, by nonce). CA keys live in files, never here.
  `CREATE TABLE ptn_memberships (
     ptn_id TEXT PRIMARY KEY,
     name TEXT NOT NULL,
     role TEXT NOT NULL CHECK (role IN ('admin', 'provider', 'consumer')),
     status TEXT NOT NULL CHECK (status IN ('active', 'left', 'recovered')),
     cert_data TEXT,
     joined_at TEXT NOT NULL,
     updated_at TEXT NOT NULL,
     CHECK ((status = 'left') = (cert_data IS NULL))
   );
   CREATE TABLE ptn_members (
     ptn_id TEXT NOT NULL REFERENCES ptn_memberships (ptn_id),
     node_id TEXT NOT NULL,
     role TEXT NOT NULL CHECK (role IN ('admin', 'provider', 'consumer')),
     status TEXT NOT NULL CHECK (status IN ('active', 'left')),
     updated_at TEXT NOT NULL,
     PRIMARY KEY (ptn_id, node_id)
   );
   CREATE TABLE ptn_used_invites (
     nonce TEXT PRIMARY KEY,
     ptn_id TEXT NOT NULL,
     node_id TEXT NOT NULL,
     used_at TEXT NOT NULL
   );`,
  // models: every model this node has downloaded, is downloading or failed to download (catalog entries
  // it never asked for are not stored), keyed by the lowercase normalised id; and the model to reload at start.
  `CREATE TABLE models (
     model_key TEXT PRIMARY KEY,
     model_id TEXT NOT NULL,
     repo TEXT NOT NULL,
     file TEXT NOT NULL,
     path TEXT NOT NULL UNIQUE,
     status TEXT NOT NULL CHECK (status IN ('downloading', 'downloaded', 'failed')),
     size_bytes INTEGER CHECK (size_bytes IS NULL OR size_bytes >= 0),
     sha256 TEXT,
     error TEXT,
     context_length INTEGER,
     created_at TEXT NOT NULL,
     downloaded_at TEXT,
     last_used_at TEXT,
     CHECK ((status = 'failed') = (error IS NOT NULL)),
     CHECK (status != 'downloaded' OR (size_bytes IS NOT NULL AND sha256 IS NOT NULL))
   );
   CREATE TABLE loaded_model (
     id INTEGER PRIMARY KEY CHECK (id = 1),
     model_key TEXT NOT NULL REFERENCES models (model_key) ON DELETE CASCADE
   );`,
  // agent: the profile (one row; a null name follows the node's name), conversations with peers' agents
  // (the id chosen by whoever started it, the same on both nodes), and their messages with the signed envelope each
  // came in, a message id used once (a retried message is never filed twice).
  `CREATE TABLE agent_profile (
     id INTEGER PRIMARY KEY CHECK (id = 1),
     name TEXT,
     capabilities TEXT NOT NULL DEFAULT '[]',
     system_prompt TEXT NOT NULL DEFAULT ''
   );
   INSERT INTO agent_profile (id) VALUES (1);
   CREATE TABLE agent_conversations (
     id TEXT PRIMARY KEY,
     peer_id TEXT NOT NULL,
     peer_name TEXT NOT NULL,
     created TEXT NOT NULL,
     last_message TEXT NOT NULL
   );
   CREATE TABLE agent_messages (
     seq INTEGER PRIMARY KEY AUTOINCREMENT,
     id TEXT NOT NULL UNIQUE,
     conversation_id TEXT NOT NULL REFERENCES agent_conversations (id),
     sender TEXT NOT NULL,
     role TEXT NOT NULL CHECK (role IN ('user', 'agent')),
     content TEXT NOT NULL,
     created TEXT NOT NULL,
     reply_to TEXT,
     envelope TEXT NOT NULL,
     CHECK ((role = 'agent') = (reply_to IS NOT NULL))
   );
   CREATE INDEX agent_messages_conversation ON agent_messages (conversation_id, seq);
   CREATE INDEX agent_messages_reply ON agent_messages (reply_to) WHERE reply_to IS NOT NULL;`,
  // imported models: GGUF files the user already has, registered where they are (an absolute path; never
  // copied, never evicted, not counted in max_storage_gb). The model to reload at start may now be one of them, so
  // loaded_model loses its foreign key to `models`; ModelRecords deletes it with the model it names.
  `CREATE TABLE imported_models (
     model_key TEXT PRIMARY KEY,
     model_id TEXT NOT NULL,
     path TEXT NOT NULL UNIQUE,
     size_bytes INTEGER NOT NULL CHECK (size_bytes >= 0),
     context_length INTEGER,
     created_at TEXT NOT NULL,
     last_used_at TEXT
   );
   CREATE TABLE loaded_model_v2 (
     id INTEGER PRIMARY KEY CHECK (id = 1),
     model_key TEXT NOT NULL
   );
   INSERT INTO loaded_model_v2 (id, model_key) SELECT id, model_key FROM loaded_model;
   DROP TABLE loaded_model;
   ALTER TABLE loaded_model_v2 RENAME TO loaded_model;`,
  // scoped keys: what a key may call. Keys made before scopes existed were full admin keys and stay so.
  `ALTER TABLE api_keys ADD COLUMN scope TEXT NOT NULL DEFAULT 'admin' CHECK (scope IN ('admin', 'inference'));`,
  // pinned downloads: the hub commit a download fetches, so a resume after a restart asks for the same
  // bytes even when the branch has moved on. Null: not pinned yet (the next request pins it).
  `ALTER TABLE models ADD COLUMN revision TEXT CHECK (revision IS NULL OR length(revision) = 40);`,
  // transfers as fields: a transfer is kept as its checked fields and its signature, not as the JSON text of its envelope,
  // which was re-read without validation. The envelope is rebuilt from them and checked again before it goes out.
  `CREATE TABLE wallet_transfers_v6 (
     id TEXT PRIMARY KEY,
     direction TEXT NOT NULL CHECK (direction IN ('outgoing', 'incoming')),
     peer_id TEXT NOT NULL CHECK (length(peer_id) = 64),
     amount_micro INTEGER NOT NULL CHECK (amount_micro > 0),
     memo TEXT NOT NULL CHECK (length(memo) <= 256),
     created_at TEXT NOT NULL,
     signature TEXT NOT NULL CHECK (length(signature) = 88),
     state TEXT NOT NULL CHECK (state IN ('pending', 'acknowledged', 'received')),
     attempts INTEGER NOT NULL DEFAULT 0,
     next_attempt_ms INTEGER NOT NULL DEFAULT 0,
     last_error TEXT,
     settled_at TEXT
   );
   INSERT INTO wallet_transfers_v6 (id, direction, peer_id, amount_micro, memo, created_at, signature, state, attempts, next_attempt_ms, last_error, settled_at)
     SELECT id, direction, peer_id, amount_micro, json_extract(envelope, '$.body.memo'), json_extract(envelope, '$.body.createdAt'),
       json_extract(envelope, '$.signature'), state, attempts, next_attempt_ms, last_error, settled_at
     FROM wallet_transfers;
   DROP TABLE wallet_transfers;
   ALTER TABLE wallet_transfers_v6 RENAME TO wallet_transfers;
   CREATE INDEX wallet_transfers_pending ON wallet_transfers (next_attempt_ms) WHERE state = 'pending';`,
  // stored responses (the Responses API): each kept response with its whole conversation, scoped to the requester
  // that made it; `seq` orders them oldest first for the count and size limits, `created_at` for expiry.
  `CREATE TABLE stored_responses (
     seq INTEGER PRIMARY KEY AUTOINCREMENT,
     id TEXT NOT NULL UNIQUE,
     requester TEXT NOT NULL,
     created_at TEXT NOT NULL,
     size_bytes INTEGER NOT NULL CHECK (size_bytes > 0),
     conversation TEXT NOT NULL,
     answer TEXT NOT NULL
   );
   CREATE INDEX stored_responses_created ON stored_responses (created_at);`,
  // model aliases: a name a client insists on, standing for a model this node serves (models/aliases.ts)
  `CREATE TABLE model_aliases (
     alias TEXT PRIMARY KEY COLLATE NOCASE CHECK (length(alias) BETWEEN 1 AND 256),
     model_id TEXT NOT NULL,
     created_at TEXT NOT NULL
   );`,
  // several loaded models: every model loaded explicitly is reloaded at the next start, not only the last one
  `CREATE TABLE loaded_models (
     model_key TEXT PRIMARY KEY,
     loaded_at TEXT NOT NULL
   );
   INSERT INTO loaded_models (model_key, loaded_at) SELECT model_key, strftime('%Y-%m-%dT%H:%M:%fZ', 'now') FROM loaded_model;
   DROP TABLE loaded_model;`
]
