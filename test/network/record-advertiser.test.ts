// This node's capability record: its parts are read when their domains announce a change (or by the slow safety
// timer), never on each read; a change is signed once and pushed to every peer; a change of the load alone waits
// out its interval and then goes by itself.
import { test, type TestContext } from 'node:test'
import assert from 'node:assert/strict'
import { pino } from 'pino'
import { generateSeed, identityFromSeed } from '../../src/identity/index.ts'
import { RecordAdvertiser, type RecordAdvertiserOptions } from '../../src/network/peers/record-advertiser.ts'
import type { CapabilityRecord } from '../../src/network/peers/capabilities.ts'
import { waitFor } from '../support/node.ts'

const HOUR = 3_600_000

function advertiser (t: TestContext, options: RecordAdvertiserOptions = {}): { records: RecordAdvertiser, pushed: CapabilityRecord[] } {
  const pushed: CapabilityRecord[] = []
  const records = new RecordAdvertiser({
    identity: identityFromSeed(generateSeed()),
    name: 'test',
    hardware: { cpu: 'test', cores: 1, memoryGB: 1, gpu: null },
    peers: () => ['peer'],
    push: async (_nodeID, envelope) => { pushed.push(envelope.body) },
    log: pino({ level: 'silent' })
  }, { checkIntervalMs: HOUR, ...options })
  t.after(() => { records.stop() })
  return { records, pushed }
}

test('a change announced is read, signed once and pushed; a read of the record in between does not read the parts', async (t) => {
  const { records, pushed } = advertiser(t)
  let loaded: string | null = null
  let reads = 0
  records.contribute('models', () => { reads++; return { loaded, downloaded: loaded == null ? [] : [loaded] } })
  records.contribute('demand', () => [])
  records.start()
  await waitFor(() => pushed.length === 1, { what: 'the record as it starts' })
  const first = pushed[0]

  loaded = 'tiny'
  const readsBefore = reads
  assert.equal(records.current().body.models.loaded, null, 'what was signed, as it was')
  assert.equal(reads, readsBefore, 'no part read for it')

  records.changed('models')
  records.changed('models', 'demand') // in the same turn: one read, one version
  await waitFor(() => pushed.length === 2, { what: 'the change to be pushed' })
  assert.equal(pushed[1].models.loaded, 'tiny')
  assert.deepEqual(pushed[1].models.downloaded, ['tiny'])
  assert.equal(pushed[1].version, first.version + 1)
  assert.equal(reads, readsBefore + 1)
  assert.equal(records.current().body.version, pushed[1].version)

  records.changed('demand') // announced, but nothing changed: no new version, nothing pushed
  await new Promise((resolve) => setImmediate(resolve))
  await new Promise((resolve) => setImmediate(resolve))
  assert.equal(records.current().body.version, pushed[1].version)
  assert.equal(pushed.length, 2)
})

test('a change of the load alone right after a version is held back, then signed and pushed without another event', async (t) => {
  const { records, pushed } = advertiser(t, { loadPushIntervalMs: 200 })
  let busySlots = 0
  records.contribute('capacity', () => ({ slots: 2, busySlots, queued: 0, reservedSlots: 0 }))
  records.start()
  await waitFor(() => pushed.length === 1, { what: 'the record as it starts' })

  busySlots = 1
  records.changed('capacity')
  await waitFor(() => pushed.some((record) => record.capacity.busySlots === 1), { what: 'the new load to go out once its interval has passed' })
  assert.equal(pushed.length, 2, 'one version for it')
})

test('a part with no event is read by the safety timer; a part that throws keeps its default', async (t) => {
  const { records, pushed } = advertiser(t, { checkIntervalMs: 50 })
  let requests = 1
  records.contribute('demand', () => [{ modelID: 'wanted', requests }])
  records.contribute('agent', () => { throw new Error('broken') })
  records.start()
  await waitFor(() => pushed.length === 1, { what: 'the record as it starts' })
  assert.equal(pushed[0].agent, null)

  requests = 2 // nobody announces it: decay and the like change with time alone
  await waitFor(() => pushed.some((record) => record.demand[0]?.requests === 2), { what: 'the safety timer to find the change' })
})
