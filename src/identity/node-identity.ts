import { existsSync, readdirSync, rmSync, statSync } from 'node:fs'
import { basename, join } from 'node:path'
import type { Logger } from 'pino'
import { CorruptStateError } from '../errors.ts'
import type { Database } from '../store/index.ts'
import { generateSeed, identityFromSeed, NODE_KEY_FILE, readKeyFile, writeKeyFile, type NodeIdentity } from './identity.ts'

/** A key written on a first start, before the database has recorded it; renamed to node.key once it has. */
const PENDING_KEY_FILE = `${NODE_KEY_FILE}.new`
/** The database's record of the identity it belongs to (the `node_state` table). */
const NODE_ID_STATE = 'node_id'

export interface NodeIdentityOptions {
  dataDir: string
  /** The database file's name in the data dir. */
  databaseFile: string
  /** The directory of PTN CA keys in the data dir: keys that only mean something with this node's identity. */
  ptnDir: string
  /** Accept what is there (`--reset-identity`): a new key where it is missing, a fresh database where that is. */
  resetIdentity: boolean
}

/**
 * Opens the node key and the database together and refuses to start when one is missing beside the other:
 * a new key beside an old database would leave the wallet, PTN memberships and pending transfers to a key the node
 * cannot sign for, and a new database beside an old key would be a fresh ledger with a second grant. Neither is ever
 * done silently; `resetIdentity` is the deliberate way. The database records the nodeID it belongs to, so a key from
 * another node is refused too.
 *
 * A first start writes the new key as `node.key.new`, records it in the database, then writes `node.key`: a crash in
 * between leaves a pending key the next start finishes with, never a database bound to a key that is nowhere.
 */
export function openNodeIdentity (deps: { openDatabase: () => Database, log: Logger }, options: NodeIdentityOptions): { identity: NodeIdentity, db: Database } {
  const { dataDir, databaseFile, resetIdentity } = options
  const keyPath = join(dataDir, NODE_KEY_FILE)
  const pendingPath = join(dataDir, PENDING_KEY_FILE)
  const databasePath = join(dataDir, databaseFile)
  const key = existsSync(keyPath) ? readKeyFile(keyPath) : null
  const pending = key == null && existsSync(pendingPath) ? readKeyFile(pendingPath) : null
  const databaseHeld = hasContent(databasePath)
  const ptnKeys = ptnKeyFiles(options.ptnDir)

  if (key == null && pending == null && (databaseHeld || ptnKeys) && !resetIdentity) {
    const there = [databaseHeld ? databaseFile : null, ptnKeys ? `${basename(options.ptnDir)}/` : null].filter((x) => x != null).join(' and ')
    throw new CorruptStateError(`${keyPath} is missing, but ${there} in ${dataDir} belong to the node whose key it was. ` +
      `Restore ${NODE_KEY_FILE} from your backup. To start as a new node on this data instead (its credits, PTN memberships ` +
      'and pending transfers stay with the old identity), start once with --reset-identity.')
  }
  if (key != null && !databaseHeld && !resetIdentity) {
    throw new CorruptStateError(`${databasePath} is missing or empty, but ${NODE_KEY_FILE} is there: this node's ledger, keys, ` +
      `settings and memberships were in it. Restore ${databaseFile} (with ${databaseFile}-wal if you have it) from your backup. ` +
      'To start this node with a fresh database instead, start once with --reset-identity.')
  }

  const db = deps.openDatabase()
  try {
    const recorded = (db.prepare('SELECT value FROM node_state WHERE key = ?').get(NODE_ID_STATE) as { value: string } | undefined)?.value ?? null
    // A pending key whose start was cut short is finished, unless the database has since been bound to another.
    const adopted = pending != null && (recorded == null || recorded === pending.nodeID) ? pending : null
    if (key == null && adopted == null && recorded != null && !resetIdentity) {
      throw new CorruptStateError(`${keyPath} is missing, but ${databaseFile} belongs to node ${recorded}. Restore ${NODE_KEY_FILE} ` +
        'from your backup, or start once with --reset-identity to start as a new node on this data.')
    }
    const identity = key ?? adopted ?? identityFromSeed(generateSeed())
    if (recorded != null && recorded !== identity.nodeID) {
      if (!resetIdentity) {
        throw new CorruptStateError(`${databaseFile} in ${dataDir} belongs to node ${recorded}, but ${NODE_KEY_FILE} is node ` +
          `${identity.nodeID}. Put back the ${NODE_KEY_FILE} of node ${recorded}, or start once with --reset-identity to bind ` +
          'this database to the present key.')
      }
      deps.log.warn({ previous: recorded, nodeID: identity.nodeID }, '--reset-identity: the database now belongs to a new identity')
    }
    if (key == null && adopted == null) writeKeyFile(pendingPath, identity.seed)
    if (recorded !== identity.nodeID) {
      db.prepare('INSERT INTO node_state (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value')
        .run(NODE_ID_STATE, identity.nodeID)
    }
    if (key == null) {
      writeKeyFile(keyPath, identity.seed)
      rmSync(pendingPath, { force: true })
    }
    return { identity, db }
  } catch (err) {
    db.close()
    throw err
  }
}

function hasContent (path: string): boolean {
  try {
    return statSync(path).size > 0
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return false
    throw err
  }
}

function ptnKeyFiles (dir: string): boolean {
  try {
    return readdirSync(dir).length > 0
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return false
    throw err
  }
}
