import { DatabaseSync } from 'node:sqlite'
import { chmodSync, existsSync } from 'node:fs'
import { CorruptStateError } from '../errors.ts'
import { MIGRATIONS } from './migrations.ts'

export type Database = DatabaseSync

/**
 * Opens (creating on first start) the node's one SQLite file and brings its schema to the newest version.
 * WAL with synchronous=FULL: a committed transaction survives a kill -9 or power loss. A file that exists but is not
 * a readable SQLite database is refused with CorruptStateError; it is never deleted or replaced, since it holds keys,
 * credits and memberships.
 */
export function openDatabase (path: string): Database {
  const existed = existsSync(path)
  let db: DatabaseSync
  try {
    db = new DatabaseSync(path)
    // Key hashes, credits and memberships: readable by the owner only. SQLite gives its -wal and -shm files the
    // database file's permissions.
    chmodSync(path, 0o600)
    db.exec('PRAGMA journal_mode = WAL')
    db.exec('PRAGMA synchronous = FULL')
    db.exec('PRAGMA foreign_keys = ON')
    db.exec('PRAGMA busy_timeout = 5000')
    const check = db.prepare('PRAGMA quick_check').get() as { quick_check: string } | undefined
    if (check?.quick_check !== 'ok') throw new Error(`integrity check says: ${check?.quick_check ?? 'nothing'}`)
  } catch (err) {
    const reason = err instanceof Error ? err.message : String(err)
    throw new CorruptStateError(`Database ${path} is unreadable (${reason}); refusing to start rather than replace it${existed ? '' : ' (it was just created)'}`)
  }
  migrate(db)
  return db
}

function migrate (db: DatabaseSync): void {
  db.exec('CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)')
  const row = db.prepare('SELECT version FROM schema_version').get() as { version: number } | undefined
  let version = row?.version ?? 0
  if (row == null) db.prepare('INSERT INTO schema_version (version) VALUES (0)').run()
  if (version > MIGRATIONS.length) {
    throw new CorruptStateError(`Database schema version ${version} is newer than this meshnode knows (${MIGRATIONS.length}); upgrade meshnode`)
  }
  for (; version < MIGRATIONS.length; version++) {
    const sql = MIGRATIONS[version]
    inTransaction(db, () => {
      db.exec(sql)
      db.prepare('UPDATE schema_version SET version = ?').run(version + 1)
    })
  }
}

/**
 * Runs `body` in one IMMEDIATE transaction: the write lock is taken at BEGIN, so two writers cannot both read a value
 * and then both act on it. `node:sqlite` is synchronous, so nothing else runs in this process meanwhile either.
 */
export function inTransaction<T> (db: Database, body: () => T): T {
  db.exec('BEGIN IMMEDIATE')
  try {
    const result = body()
    db.exec('COMMIT')
    return result
  } catch (err) {
    db.exec('ROLLBACK')
    throw err
  }
}
