/** One server-sent event: its `event:` name (`message` when unnamed) and its `data:` text. */
export interface SseEvent {
  event: string
  data: string
}

/**
 * The events of a server-sent event stream as they arrive. Comment lines (keep-alives) are not events; `onComment`
 * sees them, for callers that care (tests do).
 */
export async function * readSse (response: Response, options: { onComment?: (text: string) => void } = {}): AsyncGenerator<SseEvent> {
  if (response.body == null) return
  const decoder = new TextDecoder()
  let buffer = ''
  for await (const bytes of response.body) {
    buffer += decoder.decode(bytes, { stream: true })
    let end: number
    while ((end = buffer.indexOf('\n\n')) !== -1) {
      const block = buffer.slice(0, end)
      buffer = buffer.slice(end + 2)
      let event = 'message'
      let data: string | null = null
      for (const line of block.split('\n')) {
        if (line.startsWith(':')) options.onComment?.(line.slice(1).trim())
        else if (line.startsWith('event: ')) event = line.slice(7)
        else if (line.startsWith('data: ')) data = line.slice(6)
      }
      if (data != null) yield { event, data }
    }
  }
}
