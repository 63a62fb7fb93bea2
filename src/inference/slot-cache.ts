import { createHash, randomUUID } from 'node:crypto'
import type { LlamaContextSequence, Token } from 'node-llama-cpp'

/**
 * Who a generation runs for, the unit within which slots share evaluated prompts: `local` (the node's owner), `key:<id>`
 * (one API key), `peer:<nodeID>` (one peer), `ptn:<ptnID>` (the members of one private trusted network). Between
 * requesters a slot is cleared before reuse, so no request sees another's tokens, nor learns by its speed whether
 * someone else sent the same prompt. A client that names a cache key gets one of its requester's own,
 * `<requester>#<hash>` (`keyedRequester`).
 */
export type Requester = string

/** A slot's prompt-cache state, kept beside its context sequence. */
export interface CachedSlot {
  readonly sequence: Pick<LlamaContextSequence, 'compareContextTokens' | 'nextTokenIndex' | 'clearHistory' | 'eraseContextTokenRanges' | 'contextTokens' |
    'saveStateToFile' | 'loadStateFromFile'>
  /** Whose tokens the sequence holds; null when nobody's: empty, or left by a failed or aborted generation. */
  owner: Requester | null
  /** When the slot was last handed out (`performance.now()`), for least-recently-used eviction. */
  lastUsed: number
}

/** A requester no other request shares: what a caller that names none gets, so its cache is never reused. */
export function anonymousRequester (): Requester {
  return `anonymous:${randomUUID()}`
}

/** Whether `requester` is one of `anonymousRequester`'s: nothing of its slots is ever kept for later. */
export function isAnonymous (requester: Requester): boolean {
  return requester.startsWith('anonymous:')
}

/** The longest cache key a client may name (OpenAI's `prompt_cache_key`, Anthropic's `metadata.user_id`). */
export const MAX_CACHE_KEY_CHARS = 256

/** Separates a requester from the hash of the cache key its client named; no requester has it otherwise. */
const KEYED = '#'

/**
 * The requester a generation runs for when its client names a cache key (OpenAI's `prompt_cache_key`, Anthropic's
 * `metadata.user_id`): `<requester>#<hash>`, whose slots and saved prefixes are apart from those of the requester's
 * other keys, so that two sessions of one client do not take each other's slot or evict each other's prefix. It starts
 * with the requester, so a cache key reaches nothing of anyone else's. Only a hash of the key is in it: a key may name
 * a user, and a requester is written into the prefix states' index and a label made from it goes to peers. No key (or
 * an empty one) and an anonymous requester leave the requester as it is.
 */
export function keyedRequester (requester: Requester, cacheKey: string | null | undefined): Requester {
  if (cacheKey == null || cacheKey === '' || isAnonymous(requester)) return requester
  const hash = createHash('sha256').update(requester).update('\0').update(cacheKey).digest('base64url').slice(0, 22)
  return `${requester}${KEYED}${hash}`
}

/** The requester a keyed one belongs to (itself when not keyed): the one whose limits its saved prefixes count in. */
export function unkeyedRequester (requester: Requester): Requester {
  const at = requester.indexOf(KEYED)
  return at === -1 ? requester : requester.slice(0, at)
}

/**
 * Where a slot's long prefix goes before the slot loses it, and where it comes back from (prefix-states.ts). A state
 * that cannot be saved is not kept and one that cannot be restored is not used: neither fails the request; only a
 * slot that cannot be cleared does, as it would without them.
 */
export interface PrefixKeeper {
  /** Saves what the slot holds for its owner, if it is worth keeping; resolves once the sequence may be used again. */
  keep (slot: CachedSlot): Promise<void>
  /**
   * Loads into the slot the requester's saved prefix that shares the most of `tokens`, when it shares more than the
   * `held` tokens the slot already holds for them (what the slot holds is kept first). A state that fails its checks
   * is dropped and leaves the slot as it was or empty: the request is then answered from what the slot holds.
   */
  restore (slot: CachedSlot, requester: Requester, tokens: readonly Token[], held: number): Promise<void>
  /** Resolves once every state `keep` has begun to save is on disk and indexed (or given up). */
  settled (): Promise<void>
}

/** How many of `tokens` a slot's sequence already holds; at least one token is always evaluated (for its logits). */
function reusable (slot: CachedSlot, tokens: readonly Token[]): number {
  return Math.min(slot.sequence.compareContextTokens(tokens as Token[]).firstDifferentIndex, tokens.length - 1)
}

/**
 * A requester's slot is taken for a prompt that shares at least this part of the slot's tokens (a conversation
 * continuing); a prompt that shares less (another conversation with the same system prompt) goes to an empty slot if
 * there is one, rather than cut the other conversation's cache down to their common start.
 */
const CONTINUES = 0.5

/**
 * Picks, among free slots, the one for a request (an index into `free`): the requester's own slot whose tokens the
 * prompt continues, with the longest shared prefix; else an empty slot; else the requester's slot sharing the most;
 * else the one used least recently (which `prepareSlot` then clears). Other requesters' slots are never compared with
 * the prompt, so the choice reveals nothing of their contents.
 */
export function chooseSlot (free: readonly CachedSlot[], requester: Requester, tokens: readonly Token[]): number {
  let best = -1
  let bestShared = 0
  for (let i = 0; i < free.length; i++) {
    const slot = free[i]
    if (slot.owner !== requester) continue
    const shared = reusable(slot, tokens)
    if (shared > bestShared || (shared === bestShared && best !== -1 && slot.lastUsed < free[best].lastUsed)) {
      best = i
      bestShared = shared
    }
  }
  if (best !== -1 && bestShared >= CONTINUES * free[best].sequence.nextTokenIndex) return best
  const empty = free.findIndex((slot) => slot.sequence.nextTokenIndex === 0)
  if (empty !== -1) return empty
  if (best !== -1) return best
  let oldest = 0
  for (let i = 1; i < free.length; i++) if (free[i].lastUsed < free[oldest].lastUsed) oldest = i
  return oldest
}

/**
 * Makes a slot the requester's before its generation: a slot holding someone else's tokens (or a failed
 * generation's) is cleared, its owner's long prefix saved first when there is a `keeper`; and a saved prefix of the
 * requester's that shares more of the prompt than the slot holds is restored into it. Returns how many prompt tokens
 * the generation will reuse rather than evaluate; the generation (LlamaChat, LlamaCompletion or our token loop) trims
 * the sequence to that shared prefix itself.
 */
export async function prepareSlot (slot: CachedSlot, requester: Requester, tokens: readonly Token[], keeper: PrefixKeeper | null = null): Promise<number> {
  slot.lastUsed = performance.now()
  if (slot.owner !== requester) {
    if (keeper != null && slot.owner != null) await keeper.keep(slot)
    slot.owner = null // a clear that fails leaves the slot nobody's, so it is cleared again before the next use
    if (slot.sequence.nextTokenIndex > 0) await slot.sequence.clearHistory()
    slot.owner = requester
  }
  if (keeper != null) await keeper.restore(slot, requester, tokens, reusable(slot, tokens))
  return reusable(slot, tokens)
}

/** After a failed or aborted generation the sequence may be mid-state (a sample refused, a batch cut): trust nothing. */
export function forgetSlot (slot: CachedSlot): void {
  slot.owner = null
}
