// Who may talk to this node: bans for hostile messages last their time and are then forgotten, not kept for good.
import assert from 'node:assert/strict'
import { test } from 'node:test'
import { pino } from 'pino'
import { generateSeed, identityFromSeed } from '../../src/identity/index.ts'
import { Admission } from '../../src/network/peers/admission.ts'
import { ProtocolError } from '../../src/wire/index.ts'
import { setTimeout as delay } from 'node:timers/promises'

const log = pino({ level: 'silent' })
const nodeID = (): string => identityFromSeed(generateSeed()).nodeID

test('bans of fresh keys that never come back do not pile up: ended ones go as the next one comes', async () => {
  const admission = new Admission({ self: identityFromSeed(generateSeed()).nodeID, log }, { banMs: 200 })
  admission.setWan(true)
  const hostile = new ProtocolError('forged', 'bad_signature')
  const early = Array.from({ length: 100 }, nodeID)
  for (const id of early) assert.equal(admission.banIfHostile(id, hostile), true)
  assert.equal(admission.bannedCount, 100)
  assert.ok(early.every((id) => admission.typeOf(id) == null), 'each refused while its ban lasts')
  assert.equal(admission.banIfHostile(nodeID(), new ProtocolError('slow', 'timeout')), false, 'no ban for what is not the peer\'s fault')
  // Past the bans' end, without looking any of them up (a lookup forgets an ended ban by itself)
  await delay(400)
  const late = nodeID()
  admission.banIfHostile(late, hostile)
  assert.equal(admission.bannedCount, 1, 'the ended bans are gone')
  assert.equal(admission.isBanned(late), true)
  // A peer banned again is banned from now on
  admission.banIfHostile(late, hostile)
  assert.equal(admission.bannedCount, 1)
})
