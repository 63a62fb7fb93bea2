// Helpers for tests that drive models through the HTTP API as a client would: the events stream, a model's record.
import type { TestContext } from 'node:test'
import assert from 'node:assert/strict'
import { readSse } from '../../src/cli/sse.ts'
import { waitFor, type Api } from './node.ts'

export interface SseEvent { event: string, data: any } // eslint-disable-line @typescript-eslint/no-explicit-any

/** A live subscription to GET /v1/app/events that collects every event, as a UI would. */
export async function subscribe (t: TestContext, api: Api): Promise<{ events: SseEvent[], comments: string[], next: (event: string, modelID?: string) => Promise<SseEvent>, ended: Promise<void> }> {
  const controller = new AbortController()
  const response = await fetch(`${api.url}/v1/app/events`, { signal: controller.signal })
  assert.equal(response.status, 200)
  assert.match(response.headers.get('content-type') ?? '', /^text\/event-stream/)
  const events: SseEvent[] = []
  const comments: string[] = []
  const ended = (async () => {
    try {
      for await (const { event, data } of readSse(response, { onComment: (text) => { comments.push(text) } })) {
        events.push({ event, data: JSON.parse(data) })
      }
    } catch (err) {
      if (!controller.signal.aborted) throw err // our own hang-up at the end of the test is expected
    }
  })()
  t.after(async () => {
    controller.abort()
    await ended
  })
  const next = async (event: string, modelID?: string): Promise<SseEvent> => await waitFor(
    () => events.find((e) => e.event === event && (modelID == null || e.data.modelID === modelID)),
    { what: `event ${event}` })
  return { events, comments, next, ended }
}

export async function record (api: Api, modelID: string): Promise<any> { // eslint-disable-line @typescript-eslint/no-explicit-any
  const res = await api.get('/v1/app/models')
  assert.equal(res.status, 200)
  return res.body.models.find((m: { modelID: string }) => m.modelID === modelID)
}

export async function downloaded (api: Api, modelID: string): Promise<void> {
  await waitFor(async () => (await record(api, modelID))?.status === 'downloaded', { what: `${modelID} downloaded` })
}
