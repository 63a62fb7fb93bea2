// Reading a `wan_relay_url`: light enough for the WAN client to import without loading the relay server.
import { isIP } from 'node:net'
import type { PeerId } from '@libp2p/interface'
import { peerIdFromString } from '@libp2p/peer-id'
import { multiaddr, type Multiaddr } from '@multiformats/multiaddr'
import { InvalidInputError } from '../../errors.ts'

/**
 * The multiaddr to dial for a `wan_relay_url`: `ws://host:port`, `wss://host:port`, or a multiaddr.
 * A ws URL carries no peer id; then the result has none unless `relayPeerId` is given, and dialing it authenticates
 * whichever relay answers (noise proves its key, and the dialer learns its id from the connection). That is enough
 * for a rendezvous that is trusted with nothing: every directory record is signed by its own node.
 */
export function relayMultiaddrFromUrl (url: string, relayPeerId?: PeerId | string): Multiaddr {
  const trimmed = url.trim()
  let ma: Multiaddr
  if (trimmed.startsWith('/')) {
    try {
      ma = multiaddr(trimmed)
    } catch (err) {
      throw new InvalidInputError(`wan_relay_url ${JSON.stringify(url)} is not a valid multiaddr`, 'wan_relay_url')
    }
  } else {
    let parsed: URL
    try {
      parsed = new URL(trimmed)
    } catch (err) {
      throw new InvalidInputError(`wan_relay_url ${JSON.stringify(url)} is neither a ws:// URL nor a multiaddr`, 'wan_relay_url')
    }
    if (parsed.protocol !== 'ws:' && parsed.protocol !== 'wss:') {
      throw new InvalidInputError(`wan_relay_url must use ws:// or wss://, got ${parsed.protocol}`, 'wan_relay_url')
    }
    if (parsed.pathname !== '/' && parsed.pathname !== '') {
      throw new InvalidInputError('wan_relay_url must not have a path: the relay listens at the root', 'wan_relay_url')
    }
    const hostname = parsed.hostname.replace(/^\[(.*)\]$/, '$1')
    const version = isIP(hostname)
    const hostPart = version === 4 ? `/ip4/${hostname}` : version === 6 ? `/ip6/${hostname}` : `/dns/${hostname}`
    const port = parsed.port !== '' ? parsed.port : parsed.protocol === 'wss:' ? '443' : '80'
    ma = multiaddr(`${hostPart}/tcp/${port}/${parsed.protocol === 'wss:' ? 'tls/ws' : 'ws'}`)
  }
  const named = lastPeerId(ma)
  if (relayPeerId == null) return ma
  const wanted = typeof relayPeerId === 'string' ? peerIdFromString(relayPeerId) : relayPeerId
  if (named != null) {
    if (named !== wanted.toString()) throw new InvalidInputError(`wan_relay_url names relay ${named}, not ${wanted.toString()}`, 'wan_relay_url')
    return ma
  }
  return ma.encapsulate(`/p2p/${wanted.toString()}`)
}

/** The peer id a multiaddr ends with (`/p2p/<id>`), if any. */
export function lastPeerId (ma: Multiaddr): string | null {
  const components = ma.getComponents()
  const last = components[components.length - 1]
  return last?.name === 'p2p' && last.value != null ? last.value : null
}

/** Whether `ma` goes through a circuit relay. */
export function isCircuit (ma: Multiaddr): boolean {
  return ma.getComponents().some(component => component.name === 'p2p-circuit')
}
