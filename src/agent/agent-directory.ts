import { z } from 'zod'
import type { PeerInfo } from '../network/index.ts'
import { MAX_AGENT_CAPABILITIES, MAX_AGENT_CAPABILITY_CHARS, MAX_AGENT_NAME_CHARS } from './protocol.ts'

/** A peer's agent as its signed capability record advertises it. */
export interface DirectoryEntry {
  nodeID: string
  name: string
  capabilities: string[]
  model: string | null
  /** `online` while the peer is in the peer table; `offline` for one seen since start that has left. */
  status: 'online' | 'offline'
}

/** What a peer's record says of its agent (`CapabilityRecord.agent`); other keys are ignored for later versions. */
const AgentAdvert = z.object({
  name: z.string().min(1).max(MAX_AGENT_NAME_CHARS),
  capabilities: z.array(z.string().min(1).max(MAX_AGENT_CAPABILITY_CHARS)).max(MAX_AGENT_CAPABILITIES)
})

/** What the directory uses of the peer network. */
export interface DirectoryPeers {
  peers (): PeerInfo[]
  on (event: 'peer:online' | 'peer:updated', listener: (peer: PeerInfo) => void): unknown
  off (event: 'peer:online' | 'peer:updated', listener: (peer: PeerInfo) => void): unknown
}

/**
 * The agents of this node's peers, from the profiles their verified records advertise: those in the peer table
 * (online), then those seen since start that have left (offline), at most `maxRemembered` of them.
 */
export class AgentDirectory {
  readonly #peers: DirectoryPeers
  readonly #maxRemembered: number
  /** Every agent seen online since start, by nodeID, least recently seen first. */
  readonly #remembered = new Map<string, DirectoryEntry>()

  constructor (deps: { peers: DirectoryPeers }, options: { maxRemembered: number }) {
    this.#peers = deps.peers
    this.#maxRemembered = options.maxRemembered
  }

  /** Follows peers' records as they come and change. */
  start (): void {
    this.#peers.on('peer:online', this.#onPeer)
    this.#peers.on('peer:updated', this.#onPeer)
  }

  stop (): void {
    this.#peers.off('peer:online', this.#onPeer)
    this.#peers.off('peer:updated', this.#onPeer)
  }

  /**
   * Online agents, then offline ones, each by name. A peer whose record has no valid agent profile is not listed.
   * `capability` matches one of an agent's capabilities exactly, ignoring case.
   */
  list (filter: { capability?: string | null } = {}): DirectoryEntry[] {
    const online: DirectoryEntry[] = []
    for (const peer of this.#peers.peers()) {
      const entry = this.#remember(peer)
      if (entry != null) online.push(entry)
    }
    const onlineIDs = new Set(online.map(entry => entry.nodeID))
    const offline = [...this.#remembered.values()]
      .filter(entry => !onlineIDs.has(entry.nodeID))
      .map(entry => ({ ...entry, model: null, status: 'offline' as const }))
    const byName = (a: DirectoryEntry, b: DirectoryEntry): number => a.name.localeCompare(b.name) || a.nodeID.localeCompare(b.nodeID)
    const wanted = filter.capability?.trim().toLowerCase() ?? ''
    return [...online.sort(byName), ...offline.sort(byName)]
      .filter(entry => wanted === '' || entry.capabilities.some(c => c.toLowerCase() === wanted))
  }

  readonly #onPeer = (peer: PeerInfo): void => {
    this.#remember(peer)
  }

  #remember (peer: PeerInfo): DirectoryEntry | null {
    const advert = AgentAdvert.safeParse(peer.record.agent)
    if (!advert.success) {
      this.#remembered.delete(peer.nodeID)   // no agent (any more): not listed, online or offline
      return null
    }
    const entry: DirectoryEntry = {
      nodeID: peer.nodeID,
      name: advert.data.name,
      capabilities: advert.data.capabilities,
      model: peer.record.models.loaded,
      status: 'online'
    }
    this.#remembered.delete(peer.nodeID)   // re-inserted last: the map stays ordered by when each was last seen
    this.#remembered.set(peer.nodeID, entry)
    for (const nodeID of this.#remembered.keys()) {
      if (this.#remembered.size <= this.#maxRemembered) break
      this.#remembered.delete(nodeID)
    }
    return entry
  }
}
