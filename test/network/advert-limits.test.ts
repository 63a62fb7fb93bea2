// What a gossiped advert may cost the nodes it reaches (src/network/adverts/): its size and number of values are
// bounded and counted before anything is built from them, the agent profile is bounded to what an agent needs, a
// forgery is refused by its signature before its schema walks it, the book is bounded by what its adverts weigh, and
// a peer that sends a rejected advert loses gossipsub score.
import assert from 'node:assert/strict'
import { test, type TestContext } from 'node:test'
import type { Message } from '@libp2p/gossipsub'
import { pino } from 'pino'
import { generateSeed, identityFromSeed, type NodeIdentity } from '../../src/identity/index.ts'
import { AdvertGossip } from '../../src/network/adverts/advert-gossip.ts'
import {
  ADVERTS_TOPIC, AdvertBook, MAX_ADVERT_BYTES, MAX_ADVERT_VALUES, advertTextTooLarge, openAdvert, signAdvert, type Advert
} from '../../src/network/adverts/adverts.ts'
import { createPeerHost, type PeerHost } from '../../src/network/host/libp2p-node.ts'
import { nodeIDToPeerId } from '../../src/network/host/peer-ids.ts'
import { signDirectoryRecord } from '../../src/network/relay/directory.ts'
import {
  MAX_ADVERTISED_MODELS, MAX_AGENT_PROFILE_CHARS, openCapabilities, signCapabilities, type CapabilityRecord
} from '../../src/network/peers/capabilities.ts'
import { ProtocolError, jsonSize } from '../../src/wire/index.ts'
import { waitFor } from '../support/node.ts'
import { standInRecord } from '../support/stand-in.ts'

const log = pino({ level: 'silent' })

function advertOf (identity: NodeIdentity, overrides: Partial<CapabilityRecord> = {}): Advert {
  return signAdvert(identity, signCapabilities(identity, standInRecord(identity, overrides)), [`/ip4/127.0.0.1/tcp/4001/p2p/${nodeIDToPeerId(identity.nodeID).toString()}`])
}

function bytesOf (advert: Advert): Uint8Array {
  return Buffer.from(JSON.stringify(advert))
}

/** The largest profile the agent domain advertises: a name of 128 characters and 32 capabilities of 64. */
const FULL_AGENT_PROFILE = { name: 'n'.repeat(128), capabilities: Array.from({ length: 32 }, (_, i) => `${i}`.padEnd(64, 'c')) }

/** A host whose gossip takes adverts into `book`, and the topic validator gossipsub calls for each advert message. */
async function gossipingHost (t: TestContext, identity: NodeIdentity, book: AdvertBook): Promise<{ host: PeerHost, validate: (data: Uint8Array) => unknown }> {
  const host = await createPeerHost(identity, { listen: ['/ip4/127.0.0.1/tcp/0'], log })
  const gossip = new AdvertGossip({
    identity, book, record: () => signCapabilities(identity, standInRecord(identity)), addrs: () => [], peers: { open: async () => { throw new Error('no syncs here') } }, connected: () => [], log
  })
  gossip.start(host)
  t.after(async () => {
    await gossip.stop()
    await host.stop()
  })
  const validator = host.services.pubsub.topicValidators.get(ADVERTS_TOPIC)
  assert.ok(validator != null)
  const validate = (data: Uint8Array): unknown => validator(host.peerId, { type: 'unsigned', topic: ADVERTS_TOPIC, data } satisfies Message)
  return { host, validate }
}

test('advert limits: a record stuffed with empty objects, or an agent profile past its bound, is rejected and never kept; a full profile fits', async (t) => {
  const me = identityFromSeed(generateSeed())
  const book = new AdvertBook(me.nodeID)
  const { validate } = await gossipingHost(t, me, book)

  // Empty objects, three characters each, signed by a key made for the purpose: under the byte limit, far over the values one
  const stuffed = advertOf(identityFromSeed(generateSeed()), { agent: { padding: Array.from({ length: 80_000 }, () => ({})) } })
  const stuffedBytes = bytesOf(stuffed)
  assert.ok(stuffedBytes.byteLength < MAX_ADVERT_BYTES)
  assert.equal(advertTextTooLarge(stuffedBytes), true, 'refused from its text, before JSON.parse builds the objects')
  // Dropped, not rejected: an older node, which knows no such bound, may have forwarded it in good faith
  assert.equal(validate(stuffedBytes), 'ignore')
  // What every version checks before it forwards is rejected: text that is no JSON, an advert's shape
  assert.equal(validate(Buffer.from('{"record":')), 'reject')
  assert.equal(validate(bytesOf({ record: 1, presence: null } as unknown as Advert)), 'reject')
  assert.throws(() => openAdvert(stuffed), (err: unknown) => err instanceof ProtocolError && err.code === 'too_large', 'as a sync brings it')

  // Within the values bound, but a profile of more text than an agent needs
  const wordy = advertOf(identityFromSeed(generateSeed()), { agent: { ...FULL_AGENT_PROFILE, about: 'x'.repeat(MAX_AGENT_PROFILE_CHARS) } })
  assert.equal(advertTextTooLarge(bytesOf(wordy)), false)
  assert.equal(validate(bytesOf(wordy)), 'ignore')
  assert.throws(() => openAdvert(wordy), (err: unknown) => err instanceof ProtocolError && err.code === 'invalid' && /agent/.test(err.message))

  // Unknown fields are signed and kept with the advert, so they count too: a record padded beside its schema
  const padder = identityFromSeed(generateSeed())
  const padded = signAdvert(padder, signCapabilities(padder, { ...standInRecord(padder), padding: Array.from({ length: MAX_ADVERT_VALUES }, () => 0) } as CapabilityRecord), [])
  assert.equal(advertTextTooLarge(bytesOf(padded)), true)
  assert.throws(() => openCapabilities(padded.record, padder.nodeID), (err: unknown) => err instanceof ProtocolError && err.code === 'too_large', 'pushed to a peer')
  assert.equal(book.size, 0, 'nothing was kept')

  // What a node with the most models and the largest agent profile sends is taken
  const ids = Array.from({ length: MAX_ADVERTISED_MODELS }, (_, i) => `hf:some-org/some-model-GGUF/some-model-${i}-Q4_K_M.gguf`)
  const full = advertOf(identityFromSeed(generateSeed()), { agent: FULL_AGENT_PROFILE, models: { loaded: ids[0], allLoaded: ids, downloaded: ids } })
  assert.equal(advertTextTooLarge(bytesOf(full)), false)
  assert.equal(validate(bytesOf(full)), 'accept')
  assert.equal(book.size, 1)
  assert.deepEqual(book.get(full.record.signer)?.record.agent, FULL_AGENT_PROFILE)
})

test('advert limits: the text screen counts values as the check of the parsed advert does', () => {
  // Strings full of brackets, commas and escaped quotes, empty containers, nested ones, whitespace everywhere
  const elements = ['"[{,\\"\\\\,}]"', '[ ]', '{ }', '{ "k" : [ 1 , "]" ] }', 'null']
  const verdicts: boolean[] = []
  for (let count = 2580; count < 2620; count++) {
    const text = `{ "list" :\n[ ${Array.from({ length: count }, (_, i) => elements[i % elements.length]).join(' ,\t')} ] }`
    const values = jsonSize(JSON.parse(text), { maxChars: Infinity, maxValues: Infinity })?.values ?? 0
    assert.equal(advertTextTooLarge(Buffer.from(text)), values > MAX_ADVERT_VALUES, `${count} elements, ${values} values`)
    verdicts.push(values > MAX_ADVERT_VALUES)
  }
  assert.ok(verdicts.includes(true) && verdicts.includes(false), 'the limit was crossed')
})

test('advert limits: a forged advert is refused for its signature before its schema is walked', () => {
  const node = identityFromSeed(generateSeed())
  const advert = advertOf(node)
  const body = advert.record.body as Record<string, unknown>
  // A body the schema refuses (an empty name, a negative version) under a signature over another body
  const invalid = { ...body, name: '', version: -1 }
  const forged: Advert = { ...advert, record: { ...advert.record, body: invalid } }
  assert.throws(() => openAdvert(forged), (err: unknown) => err instanceof ProtocolError && err.code === 'bad_signature')
  // The same body, signed by its node: it is the schema that refuses it then
  const signed = signAdvert(node, signCapabilities(node, invalid as CapabilityRecord), [])
  assert.throws(() => openAdvert(signed), (err: unknown) => err instanceof ProtocolError && err.code === 'invalid')
})

test('advert limits: the book is bounded by what its adverts weigh, the least recently renewed going first', () => {
  const me = identityFromSeed(generateSeed())
  const small = Array.from({ length: 4 }, () => advertOf(identityFromSeed(generateSeed())))
  const ids = Array.from({ length: MAX_ADVERTISED_MODELS }, (_, i) => `model-${i}`.padEnd(400, '-'))
  const large = advertOf(identityFromSeed(generateSeed()), { models: { loaded: null, downloaded: ids } })
  const [smallBytes, largeBytes] = [openAdvert(small[0]).bytes, openAdvert(large).bytes]
  assert.ok(largeBytes > 10 * smallBytes, `${largeBytes} against ${smallBytes}`)

  const maxBytes = largeBytes + 2.5 * smallBytes
  const book = new AdvertBook(me.nodeID, { maxBytes })
  const gone: string[] = []
  book.on('gone', (nodeID) => { gone.push(nodeID) })
  for (const advert of small) assert.equal(book.offer(advert, openAdvert(advert)), 'kept')
  assert.equal(book.size, 4)
  assert.equal(book.bytes, small.reduce((sum, advert) => sum + openAdvert(advert).bytes, 0))

  // The large one takes the room of the two least recently renewed
  assert.equal(book.offer(large, openAdvert(large)), 'kept')
  assert.deepEqual(gone, small.slice(0, 2).map(advert => advert.record.signer))
  assert.deepEqual(book.list().map(entry => entry.nodeID), [large, small[3], small[2]].map(advert => advert.record.signer))
  assert.ok(book.bytes <= maxBytes)
  book.clear()
  assert.equal(book.bytes, 0)
})

test('advert gossip: a peer that sends an advert the validator rejects loses its gossipsub score', async (t) => {
  const me = identityFromSeed(generateSeed())
  const book = new AdvertBook(me.nodeID)
  const { host } = await gossipingHost(t, me, book)
  const sender = await createPeerHost(identityFromSeed(generateSeed()), { listen: ['/ip4/127.0.0.1/tcp/0'], log })
  t.after(async () => { await sender.stop() })
  await sender.dial(host.getMultiaddrs()[0])
  await waitFor(() => sender.services.pubsub.getSubscribers(ADVERTS_TOPIC).some(peer => peer.equals(host.peerId)), { what: 'the node\'s subscription to reach the sender' })
  // gossipsub's own class has the peer score; its public interface does not say so
  const scoreOfSender = (): number => (host.services.pubsub as unknown as { getScore (peerId: string): number }).getScore(sender.peerId.toString())
  assert.equal(scoreOfSender(), 0)

  const advert = advertOf(identityFromSeed(generateSeed()))
  const forged: Advert = { ...advert, record: { ...advert.record, body: { ...(advert.record.body as Record<string, unknown>), pricePer1kTokensMicro: 1 } } }
  await sender.services.pubsub.publish(ADVERTS_TOPIC, bytesOf(forged))
  await waitFor(() => scoreOfSender() < 0, { timeoutMs: 10_000, what: 'the sender\'s score to fall' })
  assert.equal(book.size, 0)
})

test('advert gossip: an advert from the future by this node\'s clock is dropped, not rejected: it may have been on time by the forwarder\'s', async (t) => {
  const me = identityFromSeed(generateSeed())
  const book = new AdvertBook(me.nodeID)
  const { validate } = await gossipingHost(t, me, book)
  const early = identityFromSeed(generateSeed())
  const addrs = [`/ip4/127.0.0.1/tcp/4001/p2p/${nodeIDToPeerId(early.nodeID).toString()}`]
  assert.equal(validate(bytesOf({ ...advertOf(early), presence: signDirectoryRecord(early, addrs, Date.now() + 3_600_000) })), 'ignore')
  assert.equal(book.size, 0)
  assert.equal(validate(bytesOf({ ...advertOf(early), presence: signDirectoryRecord(early, addrs) })), 'accept')
  assert.equal(book.size, 1)
})
