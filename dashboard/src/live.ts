// One EventSource on GET /v1/app/events for the whole page; components subscribe to the event names they care
// about. The browser reconnects on its own when the node restarts; `onReconnect` lets pages re-read what they show.
import { useEffect, useRef } from 'preact/hooks'
import type { NodeEventName } from '../../src/http/schemas/events.ts'

/** Every event the node sends (docs/API.md, Events); a name missing here is a type error, so none is missed. */
const EVENT_NAMES: Record<NodeEventName, true> = {
  'download.started': true,
  'download.progress': true,
  'download.verifying': true,
  'download.completed': true,
  'download.failed': true,
  'model.loaded': true,
  'model.load_failed': true,
  'model.unloaded': true,
  'model.evicted': true,
  'wallet.transaction': true,
  'peer.online': true,
  'peer.updated': true,
  'peer.offline': true,
  'settings.changed': true
}

export type LiveListener = (name: NodeEventName, data: unknown) => void

const listeners = new Set<LiveListener>()
const reconnectListeners = new Set<() => void>()
let source: EventSource | null = null

/** Opens the stream (once signed in); further calls do nothing. */
export function startLive (): void {
  if (source != null) return
  source = new EventSource('/v1/app/events')
  let opened = false
  source.addEventListener('open', () => {
    if (opened) for (const listener of reconnectListeners) listener()
    opened = true
  })
  for (const name of Object.keys(EVENT_NAMES) as NodeEventName[]) {
    source.addEventListener(name, (event) => {
      let data: unknown
      try {
        data = JSON.parse((event as MessageEvent<string>).data)
      } catch (err) {
        if (err instanceof SyntaxError) return // not ours to show; the node always sends JSON
        throw err
      }
      for (const listener of listeners) listener(name, data)
    })
  }
}

export function stopLive (): void {
  source?.close()
  source = null
}

/** Calls `listener` for each event whose name starts with one of `prefixes` (e.g. 'download.', 'wallet.'). */
export function useLive (prefixes: string[], listener: LiveListener, onReconnect?: () => void): void {
  const latest = useRef(listener)
  latest.current = listener
  const reconnect = useRef(onReconnect)
  reconnect.current = onReconnect
  const key = prefixes.join(',')
  useEffect(() => {
    const wanted = key.split(',')
    const relay: LiveListener = (name, data) => {
      if (wanted.some((prefix) => name.startsWith(prefix))) latest.current(name, data)
    }
    const again = (): void => { reconnect.current?.() }
    listeners.add(relay)
    reconnectListeners.add(again)
    return () => {
      listeners.delete(relay)
      reconnectListeners.delete(again)
    }
  }, [key])
}
