// Names a client insists on (Claude Code asks for claude-opus-…, Codex for gpt-…) given to a model this node can
// serve: an alias is resolved wherever a model id is taken, and listed in /v1/models beside the real ids. An alias
// is a local name: peers never see it, and a request that names it is routed as the model it stands for.
import type { StatementSync } from 'node:sqlite'
import { ConflictError, InvalidInputError, NotFoundError } from '../errors.ts'
import type { Database } from '../store/index.ts'
import { findCatalogEntry } from './catalog.ts'
import { MAX_MODEL_ID_LENGTH, sameModel } from './model-id.ts'

/** At most this many aliases; each is one row and one listing. */
export const MAX_MODEL_ALIASES = 256
/** What an alias may be: the names clients send (letters, digits, `. _ : + - /`), never empty or spaced. */
const ALIAS = /^[A-Za-z0-9][A-Za-z0-9._:+/-]*$/

export interface ModelAlias {
  alias: string
  /** The model it stands for, as listed. */
  modelID: string
}

export interface ModelAliasesDeps {
  db: Database
  /** Whether the node can serve `modelID` now (on its disk, or a peer's): an alias may only point at such a model. */
  known: (modelID: string) => boolean
}

export class ModelAliases {
  readonly #known: (modelID: string) => boolean
  readonly #list: StatementSync
  readonly #upsert: StatementSync
  readonly #delete: StatementSync
  /** The table, read once and kept in step: resolve runs on every request. */
  #aliases: ModelAlias[]

  constructor (deps: ModelAliasesDeps) {
    this.#known = deps.known
    this.#list = deps.db.prepare('SELECT alias, model_id FROM model_aliases ORDER BY alias')
    this.#upsert = deps.db.prepare('INSERT INTO model_aliases (alias, model_id, created_at) VALUES (?, ?, ?) ON CONFLICT (alias) DO UPDATE SET model_id = excluded.model_id')
    this.#delete = deps.db.prepare('DELETE FROM model_aliases WHERE alias = ?')
    this.#aliases = this.#read()
  }

  list (): ModelAlias[] {
    return this.#aliases.map((alias) => ({ ...alias }))
  }

  /** The model `modelID` names: the one its alias stands for, or itself. */
  resolve (modelID: string): string {
    return this.#find(modelID)?.modelID ?? modelID
  }

  /**
   * Points `alias` at `modelID` (again, if it pointed elsewhere). Refused: a name that is not an alias's shape (400), a
   * model the node cannot serve now (404), an alias that is itself a model's id here or in the catalog, or an alias
   * to an alias (409).
   */
  set (alias: string, modelID: string): ModelAlias {
    if (alias.length > MAX_MODEL_ID_LENGTH || !ALIAS.test(alias)) {
      throw new InvalidInputError(`alias must be 1 to ${MAX_MODEL_ID_LENGTH} letters, digits or . _ : + - /, starting with a letter or digit`, 'alias')
    }
    if (this.#find(modelID) != null) throw new ConflictError(`${modelID} is itself an alias; point ${alias} at the model it stands for`)
    if (!this.#known(modelID)) throw new NotFoundError(`Model ${modelID} is not on this node and no peer serves it; an alias must stand for a model it can serve`)
    if (sameModel(alias, modelID)) throw new ConflictError(`${alias} is the model's own id`)
    if (findCatalogEntry(alias) != null || this.#known(alias)) throw new ConflictError(`${alias} is a model's own id; an alias may not hide it`)
    if (this.#find(alias) == null && this.#aliases.length >= MAX_MODEL_ALIASES) throw new ConflictError(`This node has ${MAX_MODEL_ALIASES} aliases already; remove one first`)
    this.#upsert.run(alias, modelID, new Date().toISOString())
    this.#aliases = this.#read()
    return { alias, modelID }
  }

  /** Removes `alias`; 404 when there is none by that name. */
  remove (alias: string): ModelAlias {
    const found = this.#find(alias)
    if (found == null) throw new NotFoundError(`There is no alias ${alias}`)
    this.#delete.run(found.alias)
    this.#aliases = this.#read()
    return found
  }

  #find (name: string): ModelAlias | undefined {
    const lower = name.toLowerCase()
    return this.#aliases.find((alias) => alias.alias.toLowerCase() === lower)
  }

  #read (): ModelAlias[] {
    return (this.#list.all() as Array<{ alias: string, model_id: string }>).map((row) => ({ alias: row.alias, modelID: row.model_id }))
  }
}
