import type { Logger } from 'pino'
import type { NodeIdentity } from '../identity/index.ts'
import { ProtocolError } from '../wire/index.ts'
import type { Admission } from './admission.ts'
import type { PeerHost } from './libp2p-node.ts'
import { peerIdToNodeID } from './peer-ids.ts'
import { WanClient, type WanClientOptions } from './wan.ts'

export interface WanPresenceDeps {
  identity: NodeIdentity
  admission: Admission
  /** A node the relay listed is connected: it may be a peer. */
  discovered: (nodeID: string) => void
  log: Logger
}

/**
 * WAN presence (CONTRACT §6 `wan_enabled`, `wan_relay_url`): while on, a `WanClient` holds the relay connection, a
 * reservation and this node's directory record, and connects to the nodes the relay lists; every node but the relay
 * may then be a peer. Off, or another relay, stops the client and forgets the relay.
 */
export class WanPresence {
  readonly #deps: WanPresenceDeps
  readonly #options: Omit<WanClientOptions, 'relayUrl'> | undefined
  #host: PeerHost | null = null
  #client: WanClient | null = null
  #url: string | null = null

  constructor (deps: WanPresenceDeps, options?: Omit<WanClientOptions, 'relayUrl'>) {
    this.#deps = deps
    this.#options = options
  }

  attach (host: PeerHost): void {
    this.#host = host
  }

  /** Whether the client holds a connection to the relay. */
  get relayConnected (): boolean {
    return this.#client?.relayConnected ?? false
  }

  /** Switches WAN to `url` (null: off). Returns whether anything changed. */
  async apply (url: string | null): Promise<boolean> {
    const host = this.#host
    if (host == null || url === this.#url) return false
    const previous = this.#client
    this.#client = null
    this.#url = null
    if (previous != null) {
      // Off first, then stop: while the client stops (it takes a while), a WAN node that connects again must already
      // be refused, or it would fetch our record and stay in its table with a connection nobody hangs up.
      this.#deps.admission.setWan(false)
      const relay = previous.relayPeerId
      await previous.stop()
      // Forget the relay, or libp2p's relay discovery would dial it again to restore the reservation.
      if (relay != null) await host.peerStore.delete(relay)
      this.#deps.log.info('WAN stopped')
    }
    if (url == null) return true
    const client = new WanClient({ host, identity: this.#deps.identity, log: this.#deps.log.child({ part: 'wan' }) }, { ...this.#options, relayUrl: url })
    client.on('peer:discovered', (nodeID) => { this.#deps.discovered(nodeID) })
    this.#client = client
    this.#url = url
    this.#deps.admission.setWan(true, () => relayNodeID(client))
    await client.start()
    this.#deps.log.info({ relayUrl: url }, 'WAN started')
    return true
  }

  async stop (): Promise<void> {
    const client = this.#client
    this.#client = null
    this.#url = null
    this.#host = null
    this.#deps.admission.setWan(false)
    await client?.stop()
  }
}

function relayNodeID (client: WanClient): string | null {
  const relay = client.relayPeerId
  if (relay == null) return null
  try {
    return peerIdToNodeID(relay)
  } catch (err) {
    // A relay with a non-Ed25519 key has no nodeID; it can be no peer's either.
    if (err instanceof ProtocolError) return null
    throw err
  }
}
