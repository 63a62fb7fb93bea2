// Adverts (src/network/adverts/adverts.ts) as a sync brings them: each one checked against its node's key, except the
// ones this node holds byte for byte already, which were checked when they were taken (checking those again is what a
// large network's start spends its CPU on; bench/README.md). A copy of a held advert with other content under the same
// signatures is not "held": it is checked, and refused. The gossip side shares `AdvertBook.holds` (advert-gossip.ts).
import assert from 'node:assert/strict'
import { test } from 'node:test'
import { streamPair } from '@libp2p/utils'
import { pino } from 'pino'
import { z } from 'zod'
import { UnavailableError } from '../../src/errors.ts'
import { generateSeed, identityFromSeed, type NodeIdentity } from '../../src/identity/index.ts'
import { AdvertGossip } from '../../src/network/adverts/advert-gossip.ts'
import { AdvertBook, createAdvertsSyncHandler, openAdvert, signAdvert, syncAdverts, type Advert } from '../../src/network/adverts/adverts.ts'
import { signCapabilities } from '../../src/network/peers/capabilities.ts'
import { createPeerHost } from '../../src/network/host/libp2p-node.ts'
import { nodeIDToPeerId } from '../../src/network/host/peer-ids.ts'
import { signDirectoryRecord } from '../../src/network/relay/directory.ts'
import { openFrames, readMessage, writeMessage, type PeerStreams } from '../../src/wire/index.ts'
import { standInRecord } from '../support/stand-in.ts'
import { waitFor } from '../support/node.ts'

const me = identityFromSeed(generateSeed())

function advertOf (name: string, identity: NodeIdentity = identityFromSeed(generateSeed()), version = 1): Advert {
  return signAdvert(identity, signCapabilities(identity, standInRecord(identity, { name, version })), [`/ip4/127.0.0.1/tcp/4001/p2p/${nodeIDToPeerId(identity.nodeID).toString()}`])
}

/** A peer that answers syncs as a node holding `book` does (the real handler). */
function peerServing (book: AdvertBook, own: Advert): PeerStreams {
  const handler = createAdvertsSyncHandler({ book, own: () => own })
  return {
    open: async (_nodeID, protocol) => {
      const [asker, server] = await streamPair({ protocol: [protocol].flat()[0] })
      handler(server, { nodeID: own.record.signer, connection: undefined as never }).catch(() => undefined)
      return asker
    },
    reportMisbehaviour: async () => {}
  }
}

/** A peer that answers every sync with `adverts`, as they are (forged ones included). */
function peerAnswering (adverts: unknown[]): PeerStreams {
  return {
    open: async (_nodeID, protocol) => {
      const [asker, server] = await streamPair({ protocol: [protocol].flat()[0] })
      void (async () => {
        const frames = openFrames(server, { maxFrameBytes: 8 * 1024 * 1024 })
        await readMessage(frames, z.unknown())
        await writeMessage(frames, { adverts })
        await server.close()
      })().catch(() => undefined)
      return asker
    },
    reportMisbehaviour: async () => {}
  }
}

test('adverts: a sync leaves out what the book holds byte for byte, checks the rest, and refuses a held advert\'s signatures over other content', async () => {
  const book = new AdvertBook(me.nodeID)
  const held = advertOf('held')
  assert.equal(book.offer(held, openAdvert(held)), 'kept')
  const fresh = advertOf('fresh')
  const body = held.record.body as Record<string, unknown>
  // The held advert's signatures, over a record that says something else (a lower price): a forgery.
  const forged: Advert = { ...held, record: { ...held.record, body: { ...body, pricePer1kTokensMicro: 1 } } }
  // A copy of the held advert that differs in its presence (a later timestamp) under the old signature.
  const presence = held.presence.body as Record<string, unknown>
  const replayed: Advert = { ...held, presence: { ...held.presence, body: { ...presence, timestamp: Number(presence.timestamp) + 1 } } }

  assert.equal(book.holds(held), true)
  assert.equal(book.holds(structuredClone(held)), true, 'the same advert, received again')
  assert.equal(book.holds(forged), false)
  assert.equal(book.holds(replayed), false)
  assert.equal(book.holds(fresh), false)

  const { adverts, rejected } = await syncAdverts(peerAnswering([held, forged, replayed, fresh]), held.record.signer, { book })
  assert.equal(rejected, 2, 'the forged record and the replayed presence do not verify')
  assert.deepEqual(adverts.map(({ opened }) => opened.record.name), ['fresh'])
  assert.equal(book.offer(adverts[0].advert, adverts[0].opened), 'kept')
  assert.equal(book.size, 2)
  assert.equal(book.get(held.record.signer)?.record.pricePer1kTokensMicro, body.pricePer1kTokensMicro, 'the held advert is unchanged')

  // Without a book, everything is checked (the first sync of a node that holds nothing yet).
  const unbooked = await syncAdverts(peerAnswering([held, forged, fresh]), held.record.signer)
  assert.equal(unbooked.rejected, 1)
  assert.deepEqual(unbooked.adverts.map(({ opened }) => opened.record.name).sort(), ['fresh', 'held'])
})

test('adverts: an advert past its lifetime is not held, even byte for byte', () => {
  const book = new AdvertBook(me.nodeID, { ttlMs: 60_000 })
  const advert = advertOf('short-lived')
  const opened = openAdvert(advert)
  assert.equal(book.offer(advert, opened), 'kept')
  assert.equal(book.holds(advert, opened.presence.timestamp + 59_999), true)
  assert.equal(book.holds(advert, opened.presence.timestamp + 60_000), false)
})

test('adverts: a node that left is not brought back by an advert of its from before it left, replayed by anyone', () => {
  const book = new AdvertBook(me.nodeID, { ttlMs: 3_600_000 })
  const node = identityFromSeed(generateSeed())
  const addrs = [`/ip4/127.0.0.1/tcp/4001/p2p/${nodeIDToPeerId(node.nodeID).toString()}`]
  const record = signCapabilities(node, standInRecord(node, { name: 'leaving', version: 5 }))
  const at = (addrsThen: string[], signedAt: number, signed = record): Advert => ({ record: signed, presence: signDirectoryRecord(node, addrsThen, signedAt) })
  const t0 = Date.now() - 60_000
  const before = at(addrs, t0)
  assert.equal(book.offer(before, openAdvert(before)), 'kept')
  const leaving = at([], t0 + 1_000)
  assert.equal(book.offer(leaving, openAdvert(leaving)), 'left')
  assert.equal(book.get(node.nodeID), null)
  // The advert from before, heard again (a replay, or gossip running late): still gone
  assert.equal(book.offer(before, openAdvert(before)), 'known')
  assert.equal(book.get(node.nodeID), null)
  // Back for real: a presence after the leave, or a newer record
  const back = at(addrs, t0 + 2_000)
  assert.equal(book.offer(back, openAdvert(back)), 'kept')
  assert.notEqual(book.get(node.nodeID), null)
})

test('adverts: a windowed sync answers what changed at the answering node within the window; a renewal alone is no change', async () => {
  const book = new AdvertBook(me.nodeID)
  const own = advertOf('answering node')
  const oldIdentity = identityFromSeed(generateSeed())
  const old = advertOf('heard long ago', oldIdentity)
  const recent = advertOf('heard lately')
  const now = Date.now()
  assert.equal(book.offer(old, openAdvert(old), now - 10 * 60_000), 'kept')
  assert.equal(book.offer(recent, openAdvert(recent), now - 5_000), 'kept')
  const peer = peerServing(book, own)
  const names = async (changedWithinMs?: number): Promise<string[]> =>
    (await syncAdverts(peer, own.record.signer, { changedWithinMs })).adverts.map(({ opened }) => opened.record.name).sort()

  assert.deepEqual(await names(), ['answering node', 'heard lately', 'heard long ago'], 'no window: every advert held')
  assert.deepEqual(await names(60_000), ['answering node', 'heard lately'], 'its own advert, and what changed within the minute')

  // The old node renews its advert (a later presence, the same record and addresses): heard now, changed long ago.
  await new Promise(resolve => setTimeout(resolve, 2))
  const renewed = advertOf('heard long ago', oldIdentity)
  renewed.record = old.record
  assert.equal(book.offer(renewed, openAdvert(renewed), now), 'kept')
  assert.equal(book.get(oldIdentity.nodeID)?.changedAt, now - 10 * 60_000)
  assert.deepEqual(await names(60_000), ['answering node', 'heard lately'])

  // A new version of its record is a change.
  const changed = advertOf('heard long ago, changed', oldIdentity, 2)
  assert.equal(book.offer(changed, openAdvert(changed), now), 'kept')
  assert.deepEqual(await names(60_000), ['answering node', 'heard lately', 'heard long ago, changed'])

  // An asker that holds fewer adverts than the answerer missed some older than any window: it gets them all
  const behind = async (known: AdvertBook): Promise<string[]> =>
    (await syncAdverts(peer, own.record.signer, { changedWithinMs: 60_000, book: known })).adverts.map(({ opened }) => opened.record.name).sort()
  const missing = new AdvertBook(me.nodeID)
  missing.offer(recent, openAdvert(recent), now)
  assert.deepEqual(await behind(missing), ['answering node', 'heard long ago, changed'], 'all of them, less what it holds')
  missing.offer(changed, openAdvert(changed), now)
  assert.deepEqual(await behind(missing), ['answering node'], 'as many as the answerer: the window again')
})

test('advert gossip: a node whose first sync fails asks again though no other peer comes online; its join ends with its first pull', async (t) => {
  const host = await createPeerHost(me, { log: pino({ level: 'silent' }) })
  const book = new AdvertBook(me.nodeID)
  const peer = advertOf('the peer')
  const answering = peerServing(new AdvertBook(peer.record.signer), peer)
  const asked: string[] = []
  const gossip = new AdvertGossip({
    identity: me,
    book,
    record: () => signCapabilities(me, standInRecord(me)),
    addrs: () => [],
    // The peer cannot be reached for the first sync (a stream not opened in time, say), then answers as a node does.
    peers: {
      open: async (nodeID, protocol, options) => {
        asked.push(nodeID)
        if (asked.length === 1) throw new UnavailableError(`Peer ${nodeID} is unreachable: no stream within 10000 ms`)
        return await answering.open(nodeID, protocol, options)
      }
    },
    connected: () => [peer.record.signer],
    log: pino({ level: 'silent' })
  }, { resyncMs: 50, pullMs: 50 })
  gossip.start(host)
  t.after(async () => {
    await gossip.stop()
    await host.stop()
  })
  assert.equal(gossip.joining, true)

  // The only peer there is comes online once; nothing else will make the node ask again.
  gossip.peerOnline(peer.record.signer)
  await waitFor(() => book.get(peer.record.signer) != null, { what: 'the peer\'s advert, from a sync after the failed one' })
  assert.ok(asked.length >= 2)
  // Resyncs at 50, 150, 350 and 750 ms after the first sync that succeeded, then the first pull 50 ms later.
  await waitFor(() => !gossip.joining, { what: 'the join to end with the first pull' })
  assert.ok(asked.length >= 6, `the first sync, the one after it, four resyncs and a pull: ${asked.length} asked`)
})
