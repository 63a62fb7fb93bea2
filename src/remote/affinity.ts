// Conversation affinity: which peer last answered a requester's conversation, so that its next turn goes back to the
// peer whose slot (or saved prefix state) still holds the evaluated prompt, and only the new part is evaluated there.
// A request is known by hashes of its prefixes: for a chat, one at the end of each message; for a text completion,
// one every COMPLETION_AFFINITY_CHUNK_CHARS characters of its prompt. An answered request records the hash of its
// whole prompt (for a completion, of the prompt's last whole chunk); the next request looks its hashes up, longest
// first. The requester is hashed in first, so one requester's entries never match another's request.
import { createHash, type Hash } from 'node:crypto'
import type { ChatMessage, RoutedRequest } from '../inference/index.ts'

/**
 * Entries kept, one per answered request: past it, the least recently used goes. A few thousand outlast every
 * conversation a node's users hold at once, and take a few hundred KiB.
 */
export const AFFINITY_MAX_ENTRIES = 4096
/**
 * An entry older than this (since its peer last answered it) is not used: by then the peer's slots have most likely
 * served others, and the ranking alone chooses.
 */
export const AFFINITY_MAX_AGE_MS = 30 * 60_000
/**
 * A completion's prompt is hashed at every multiple of this many characters (a chat at each message): the next prompt
 * of a conversation extends the last one by an unknown length, so only fixed boundaries are shared. A prompt shorter
 * than one chunk has no affinity; a longer one loses at most a chunk of its prefix at the chosen peer.
 */
export const COMPLETION_AFFINITY_CHUNK_CHARS = 256

/** The hashes of one request's prefixes: `lookup` longest first, `whole` what an answer to it records. */
export interface ConversationKeys {
  readonly lookup: readonly string[]
  readonly whole: string
}

export interface ConversationAffinityOptions {
  /** @default AFFINITY_MAX_ENTRIES */
  maxEntries?: number
  /** @default AFFINITY_MAX_AGE_MS */
  maxAgeMs?: number
  /** Milliseconds, for the age limit. @default Date.now */
  now?: () => number
}

interface Entry { nodeID: string, at: number }

/** The peers that answered requesters' recent requests, bounded in count and age. */
export class ConversationAffinity {
  readonly #entries = new Map<string, Entry>()   // in order of last use, oldest first
  readonly #maxEntries: number
  readonly #maxAgeMs: number
  readonly #now: () => number

  constructor (options: ConversationAffinityOptions = {}) {
    this.#maxEntries = options.maxEntries ?? AFFINITY_MAX_ENTRIES
    this.#maxAgeMs = options.maxAgeMs ?? AFFINITY_MAX_AGE_MS
    this.#now = options.now ?? Date.now
    if (!Number.isSafeInteger(this.#maxEntries) || this.#maxEntries < 1) throw new RangeError(`maxEntries must be an integer >= 1, got ${this.#maxEntries}`)
  }

  get size (): number {
    return this.#entries.size
  }

  /**
   * The peer that answered the longest of `keys.lookup` within the age limit and that `usable` accepts (still a
   * candidate, not saturated), told when that peer answered; null when none. A hit counts as a use of its entry.
   */
  peerFor (keys: ConversationKeys, usable: (nodeID: string, answeredAt: number) => boolean): string | null {
    const now = this.#now()
    for (const key of keys.lookup) {
      const entry = this.#entries.get(key)
      if (entry == null) continue
      if (now - entry.at > this.#maxAgeMs) {
        this.#entries.delete(key)
        continue
      }
      if (!usable(entry.nodeID, entry.at)) continue
      this.#entries.delete(key)
      this.#entries.set(key, entry)
      return entry.nodeID
    }
    return null
  }

  /** `nodeID` answered the request `keys` came from: its next turn goes there. */
  answered (keys: ConversationKeys, nodeID: string): void {
    this.#entries.delete(keys.whole)
    this.#entries.set(keys.whole, { nodeID, at: this.#now() })
    while (this.#entries.size > this.#maxEntries) {
      const oldest = this.#entries.keys().next().value as string
      this.#entries.delete(oldest)
    }
  }
}

/**
 * The prefix hashes of `request` made for `requester`; null where a request has none: embeddings (no prompt to
 * reuse), a fill-in-the-middle completion (its prompt is laid out around the suffix), a completion prompt shorter
 * than one chunk. One pass over the request: each message is serialised once, each boundary a copy of the running hash.
 */
export function conversationKeys (requester: string, request: RoutedRequest): ConversationKeys | null {
  if (request.kind === 'chat') {
    if (request.messages.length === 0) return null
    const hash = createHash('sha256').update(line(['chat', requester, request.modelID, request.tools ?? null]))
    const boundaries: string[] = []
    for (const message of request.messages) {
      hash.update(line(messageParts(message)))
      boundaries.push(digestOf(hash))
    }
    return longestFirst(boundaries)
  }
  if (request.kind === 'completion') {
    if (request.suffix != null) return null
    const chunks = Math.floor(request.prompt.length / COMPLETION_AFFINITY_CHUNK_CHARS)
    if (chunks === 0) return null
    const hash = createHash('sha256').update(line(['completion', requester, request.modelID]))
    const boundaries: string[] = []
    for (let chunk = 0; chunk < chunks; chunk++) {
      hash.update(request.prompt.slice(chunk * COMPLETION_AFFINITY_CHUNK_CHARS, (chunk + 1) * COMPLETION_AFFINITY_CHUNK_CHARS))
      boundaries.push(digestOf(hash))
    }
    return longestFirst(boundaries)
  }
  return null
}

/** What of a message its rendering in the prompt depends on; a thought is left out, as clients often drop it. */
function messageParts (message: ChatMessage): unknown[] {
  return [message.role, message.content, message.toolCalls?.map(call => [call.id, call.name, call.arguments]) ?? null, message.toolCallID ?? null]
}

/** One JSON text per line: JSON escapes newlines, so consecutive lines never run into each other's. */
function line (value: unknown): string {
  return `${JSON.stringify(value)}\n`
}

/** `boundaries` in the order hashed (shortest prefix first). */
function longestFirst (boundaries: string[]): ConversationKeys {
  return { lookup: boundaries.toReversed(), whole: boundaries[boundaries.length - 1] }
}

function digestOf (hash: Hash): string {
  return hash.copy().digest('base64url')
}
