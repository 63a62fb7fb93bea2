import { createParser } from 'eventsource-parser'

/** One server-sent event: its `event:` name (`message` when unnamed) and its `data:` text. */
export interface SseEvent {
  event: string
  data: string
}

/**
 * The events of a server-sent event stream as they arrive. Comment lines (keep-alives) are not events; `onComment`
 * sees them, for callers that care (tests do). An event left unfinished when the stream ends is not one.
 */
export async function * readSse (response: Response, options: { onComment?: (text: string) => void } = {}): AsyncGenerator<SseEvent> {
  if (response.body == null) return
  const { onComment } = options
  const parsed: SseEvent[] = []
  const parser = createParser({
    onEvent: ({ event, data }) => { parsed.push({ event: event ?? 'message', data }) },
    onComment: onComment == null ? undefined : (text) => { onComment(text.trim()) }
  })
  const decoder = new TextDecoder()
  for await (const bytes of response.body) {
    parser.feed(decoder.decode(bytes, { stream: true }))
    for (const event of parsed.splice(0)) yield event
  }
}
