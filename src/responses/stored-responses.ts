import type { StatementSync } from 'node:sqlite'
import { z } from 'zod'
import { CorruptStateError, NotFoundError } from '../errors.ts'
import { MAX_TOOL_CALL_ID_CHARS, MAX_TOOL_NAME_CHARS, type ChatMessage } from '../inference/index.ts'
import { inTransaction, type Database } from '../store/index.ts'

/** At most this many responses are kept, over all requesters; the oldest go first. */
export const MAX_STORED_RESPONSES = 1000
/** A response whose stored form (its whole conversation and the answer) is larger is answered but not kept. */
export const MAX_STORED_RESPONSE_BYTES = 1024 * 1024
/** All kept responses together stay under this many bytes; the oldest go first. */
export const MAX_STORED_RESPONSES_TOTAL_BYTES = 256 * 1024 * 1024
/** A response is kept this long after it was made; then it is gone, as if deleted. */
export const STORED_RESPONSE_TTL_MS = 30 * 24 * 60 * 60 * 1000

/** One kept response: the conversation it ended (what continuing it starts from) and the answer as it was given. */
export interface StoredResponse {
  id: string
  /** Who made it (`local`, `key:<id>`): nobody else may read, continue or delete it. */
  requester: string
  /** ISO 8601 UTC. */
  createdAt: string
  /** The input (after any response it continued) and the answer, as chat messages; never the instructions. */
  conversation: ChatMessage[]
  /** The answer as the API gave it; this store keeps it as is and never reads it. */
  answer: object
}

export interface StoredResponsesOptions {
  /** Default MAX_STORED_RESPONSES. */
  maxResponses?: number
  /** Default MAX_STORED_RESPONSE_BYTES. */
  maxResponseBytes?: number
  /** Default MAX_STORED_RESPONSES_TOTAL_BYTES. */
  maxTotalBytes?: number
  /** Default STORED_RESPONSE_TTL_MS. */
  ttlMs?: number
  /** Default Date.now. */
  now?: () => number
}

// Read back with a check: a row that no longer parses is refused as corrupt, never fed to a model half-understood.
const ToolCallRecord = z.object({ id: z.string().min(1).max(MAX_TOOL_CALL_ID_CHARS), name: z.string().min(1).max(MAX_TOOL_NAME_CHARS), arguments: z.string() })
const MessageRecord = z.object({
  role: z.enum(['system', 'user', 'assistant', 'tool']),
  content: z.string(),
  toolCalls: z.array(ToolCallRecord).nullish(),
  toolCallID: z.string().nullish(),
  /** An assistant message's thought, rendered again as the model wrote it (rows kept before it have none). */
  reasoning: z.string().nullish()
})
const Conversation = z.array(MessageRecord)

interface ResponseRow { id: string, requester: string, created_at: string, conversation: string, answer: string }

/**
 * Responses kept for `GET /v1/responses/{id}` and for `previous_response_id` (table `stored_responses`), each scoped
 * to the requester that made it. A response keeps its whole conversation rather than a link to the one it continued,
 * so that deleting or expiring one never breaks another. Bounded in count, size and age: each save drops what is past
 * its age and then the oldest beyond the limits, in the same transaction.
 */
export class StoredResponses {
  readonly #db: Database
  readonly #maxResponses: number
  readonly #maxResponseBytes: number
  readonly #maxTotalBytes: number
  readonly #ttlMs: number
  readonly #now: () => number
  readonly #insert: StatementSync
  readonly #find: StatementSync
  readonly #delete: StatementSync
  readonly #expire: StatementSync
  readonly #trim: StatementSync

  constructor (deps: { db: Database }, options: StoredResponsesOptions = {}) {
    const db = this.#db = deps.db
    this.#maxResponses = options.maxResponses ?? MAX_STORED_RESPONSES
    this.#maxResponseBytes = options.maxResponseBytes ?? MAX_STORED_RESPONSE_BYTES
    this.#maxTotalBytes = options.maxTotalBytes ?? MAX_STORED_RESPONSES_TOTAL_BYTES
    this.#ttlMs = options.ttlMs ?? STORED_RESPONSE_TTL_MS
    this.#now = options.now ?? Date.now
    this.#insert = db.prepare('INSERT INTO stored_responses (id, requester, created_at, size_bytes, conversation, answer) VALUES (?, ?, ?, ?, ?, ?)')
    // An expired row that no save has dropped yet is not found either
    this.#find = db.prepare('SELECT id, requester, created_at, conversation, answer FROM stored_responses WHERE id = ? AND requester = ? AND created_at >= ?')
    this.#delete = db.prepare('DELETE FROM stored_responses WHERE id = ? AND requester = ?')
    this.#expire = db.prepare('DELETE FROM stored_responses WHERE created_at < ?')
    // Newest first: a row goes once the rows up to it number too many or weigh too much
    this.#trim = db.prepare(`DELETE FROM stored_responses WHERE seq IN (
      SELECT seq FROM (SELECT seq, ROW_NUMBER() OVER newest AS n, SUM(size_bytes) OVER newest AS bytes FROM stored_responses WINDOW newest AS (ORDER BY seq DESC))
      WHERE n > ? OR bytes > ?)`)
  }

  /**
   * Keeps a response, dropping expired ones and the oldest beyond the limits. False when it is larger than
   * MAX_STORED_RESPONSE_BYTES (then nothing is kept).
   */
  save (response: Omit<StoredResponse, 'createdAt'>): boolean {
    const conversation = JSON.stringify(response.conversation)
    const answer = JSON.stringify(response.answer)
    const size = Buffer.byteLength(conversation) + Buffer.byteLength(answer)
    if (size > this.#maxResponseBytes) return false
    const now = this.#now()
    inTransaction(this.#db, () => {
      this.#expire.run(this.#cutoff(now))
      this.#insert.run(response.id, response.requester, new Date(now).toISOString(), size, conversation, answer)
      this.#trim.run(this.#maxResponses, this.#maxTotalBytes)
    })
    return true
  }

  /** The response `id` of `requester`; NotFoundError when there is none (never made, another's, deleted, expired). */
  get (id: string, requester: string): StoredResponse {
    const row = this.#find.get(id, requester, this.#cutoff(this.#now())) as ResponseRow | undefined
    if (row == null) throw new NotFoundError(`Response not found: ${id} (responses are kept ${this.#ttlMs / 86_400_000} days, and only for the API key that made them)`)
    return toStored(row)
  }

  /** Deletes the response `id` of `requester`; NotFoundError when there is none. */
  delete (id: string, requester: string): void {
    this.get(id, requester)
    this.#delete.run(id, requester)
  }

  #cutoff (now: number): string {
    return new Date(now - this.#ttlMs).toISOString()
  }
}

function toStored (row: ResponseRow): StoredResponse {
  const conversation = Conversation.safeParse(parseJson(row.conversation))
  const answer = parseJson(row.answer)
  if (!conversation.success || typeof answer !== 'object' || answer == null) throw new CorruptStateError(`Stored response ${row.id} cannot be read back`)
  return { id: row.id, requester: row.requester, createdAt: row.created_at, conversation: conversation.data, answer }
}

function parseJson (text: string): unknown {
  try {
    return JSON.parse(text)
  } catch (err) {
    throw new CorruptStateError(`A stored response is not JSON (${err instanceof Error ? err.message : String(err)})`)
  }
}
