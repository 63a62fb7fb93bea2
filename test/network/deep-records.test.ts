// A capability record whose free JSON (the agent profile) is nested too deep, pushed or gossiped: refused as a
// malformed record (a ProtocolError or a schema error, what bans the sender or rejects the gossip), never a RangeError
// logged at error for every message that carries it.
import assert from 'node:assert/strict'
import { test } from 'node:test'
import type { z } from 'zod'
import { generateSeed, identityFromSeed } from '../../src/identity/index.ts'
import { Advert, openAdvert, signAdvert } from '../../src/network/adverts/adverts.ts'
import { nodeIDToPeerId } from '../../src/network/host/peer-ids.ts'
import { openCapabilities, signCapabilities } from '../../src/network/peers/capabilities.ts'
import { MAX_JSON_DEPTH, ProtocolError, isHostile } from '../../src/wire/index.ts'
import { standInRecord } from '../support/stand-in.ts'

function nested (depth: number): z.JSONType {
  return JSON.parse('['.repeat(depth) + '1' + ']'.repeat(depth)) as z.JSONType
}

test('a record whose agent profile nests too deep is a hostile ProtocolError, signed or not, pushed or gossiped', () => {
  const node = identityFromSeed(generateSeed())
  const addrs = [`/ip4/127.0.0.1/tcp/4001/p2p/${nodeIDToPeerId(node.nodeID).toString()}`]
  // Within the bound a profile is any JSON; one level past it, signed by its node, it is refused by the record's shape
  const fits = signCapabilities(node, standInRecord(node, { agent: { profile: nested(MAX_JSON_DEPTH - 1) } }))
  assert.deepEqual(openCapabilities(fits, node.nodeID).agent, { profile: nested(MAX_JSON_DEPTH - 1) })
  const over = signCapabilities(node, standInRecord(node, { agent: { profile: nested(MAX_JSON_DEPTH) } }))
  // Far past it (no signer of ours would write it, so the signature is another record's): refused before the signature
  const deep = { ...fits, body: { ...fits.body, agent: { profile: nested(10_000) } } }
  for (const [what, envelope] of [['one level over', over], ['10000 levels', deep]] as const) {
    assert.throws(() => openCapabilities(envelope, node.nodeID), (err: unknown) => err instanceof ProtocolError && isHostile(err), what)
    assert.throws(() => openAdvert(signAdvert(node, envelope, addrs)), (err: unknown) => err instanceof ProtocolError && isHostile(err), `${what}, gossiped`)
  }
  // What the gossip validator parses first: a schema error, which rejects the message (not a RangeError, logged and ignored)
  assert.throws(() => Advert.parse({ record: deep, presence: signAdvert(node, fits, addrs).presence }), (err: unknown) => err instanceof Error && err.name === 'ZodError')
})
