// The models domain's event types (src/models/events.ts) and the zod schemas that document them on the wire
// (src/http/schemas/models.ts) say the same thing: the same event names, the same data, checked by the type checker
// and against the events a real download, load and unload send.
import assert from 'node:assert/strict'
import { join } from 'node:path'
import { test } from 'node:test'
import { ModelEvents, type ModelEventData } from '../../src/http/schemas/models.ts'
import { MODEL_EVENT_TYPES, type ModelEventMap, type ModelEventType } from '../../src/models/index.ts'
import { startFakeHub } from '../support/fake-hub.ts'
import { startTestNode, tempDir, waitFor } from '../support/node.ts'
import { writeTinyGguf } from '../support/tiny-gguf.ts'

/** true when A and B are the same type; the assignment below fails to compile for any event where they are not. */
type Same<A, B> = [A] extends [B] ? ([B] extends [A] ? true : false) : false
const agree: { [K in ModelEventType]: Same<ModelEventMap[K][0], ModelEventData<K>> } = {
  'download.started': true,
  'download.progress': true,
  'download.verifying': true,
  'download.completed': true,
  'download.failed': true,
  'model.loaded': true,
  'model.load_failed': true,
  'model.unloaded': true,
  'model.evicted': true
}

test('every model event type has a schema, and every schema an event type', () => {
  assert.deepEqual([...MODEL_EVENT_TYPES].sort(), Object.keys(ModelEvents).sort())
  assert.deepEqual(Object.keys(agree).sort(), [...MODEL_EVENT_TYPES].sort())
})

test('the events of a real download, load and unload match their schemas exactly', async (t) => {
  const hub = await startFakeHub()
  t.after(() => hub.close())
  const { path } = await writeTinyGguf(join(await tempDir(t, 'meshnode-hub-files-'), 'tiny.gguf'))
  await hub.addFile('meshnode-test/tiny', 'tiny.gguf', path)
  const node = await startTestNode(t, { hfEndpoint: hub.url })
  const seen: Array<[ModelEventType, unknown]> = []
  for (const type of MODEL_EVENT_TYPES) node.node.models.events.on(type, (data: unknown) => { seen.push([type, data]) })

  const model = 'hf.co/meshnode-test/tiny/tiny.gguf'
  assert.equal((await node.api.post('/v1/app/models/download', { modelID: model })).status, 200)
  await waitFor(() => seen.some(([type]) => type === 'download.completed'), { what: 'the download to complete' })
  assert.equal((await node.api.post('/v1/app/models/load', { modelID: model })).status, 200)
  assert.equal((await node.api.post('/v1/app/models/unload', {})).status, 200)
  await waitFor(() => seen.some(([type]) => type === 'model.unloaded'), { what: 'the unload event' })

  for (const type of ['download.started', 'download.progress', 'download.verifying', 'download.completed', 'model.loaded', 'model.unloaded'] as const) {
    assert.ok(seen.some(([seenType]) => seenType === type), `a ${type} event was sent`)
  }
  for (const [type, data] of seen) {
    // Strict: a field the schema does not know would reach clients undocumented.
    const parsed = ModelEvents[type].strict().safeParse(data)
    assert.ok(parsed.success, `${type}: ${JSON.stringify(data)} ${parsed.success ? '' : parsed.error.message}`)
  }
})
