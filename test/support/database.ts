// Databases as older meshnode versions left them, for migration tests.
import { rmSync } from 'node:fs'
import { DatabaseSync } from 'node:sqlite'
import { MIGRATIONS } from '../../src/store/migrations.ts'

/** A fresh database file at `path` as a meshnode of schema `version` made it: its migrations applied, nothing newer. */
export function olderDatabase (path: string, version: number): DatabaseSync {
  for (const file of [path, `${path}-wal`, `${path}-shm`]) rmSync(file, { force: true })
  const db = new DatabaseSync(path)
  db.exec('PRAGMA journal_mode = WAL')
  db.exec('CREATE TABLE schema_version (version INTEGER NOT NULL)')
  db.prepare('INSERT INTO schema_version (version) VALUES (?)').run(version)
  for (const sql of MIGRATIONS.slice(0, version)) db.exec(sql)
  return db
}

/** The schema version just before the migration whose SQL contains `marker`: a database as it was before it. */
export function versionBefore (marker: string): number {
  const index = MIGRATIONS.findIndex((sql) => sql.includes(marker))
  if (index < 0) throw new Error(`no migration contains ${marker}`)
  return index
}
