// A connection closed in the very tick a stream is opened on it (src/network/host/patches/libp2p-yamux.ts): what
// identify and ConnectionPolicy do to a duplicate connection, and what made a CI run of relays.test.ts end on an
// uncaught `StreamStateError: Cannot write to a stream that is closed`. Real hosts, directly and through a real relay.
import assert from 'node:assert/strict'
import { test, type TestContext } from 'node:test'
import type { Connection, Stream } from '@libp2p/interface'
import type { Multiaddr } from '@multiformats/multiaddr'
import { pino } from 'pino'
import { generateSeed, identityFromSeed } from '../../src/identity/index.ts'
import { createPeerHost, handleProtocol, type PeerHost } from '../../src/network/host/libp2p-node.ts'
import { relayMultiaddrFromUrl, startRelay } from '../../src/network/relay/relay.ts'
import { isUnawaitedFrame } from '../../src/network/host/patches/libp2p-yamux.ts'
import { waitFor } from '../support/node.ts'

const log = pino({ level: process.env.MESHNODE_TEST_LOG ?? 'silent' })
const ECHO_PROTOCOL = '/meshnode-test/echo/1.0.0'

async function startHost (t: TestContext, options: Parameters<typeof createPeerHost>[1]): Promise<PeerHost> {
  // Many connections from one address in a row: above libp2p's default of 5 a second, or it refuses the next.
  const host = await createPeerHost(identityFromSeed(generateSeed()), { inboundConnectionsPerSecond: 1_000, log, ...options })
  t.after(async () => { await host.stop() })
  await handleProtocol(host, ECHO_PROTOCOL, async (stream: Stream) => {
    try {
      for await (const chunk of stream) stream.send(chunk)
      await stream.close()
    } catch (err) {
      stream.abort(err instanceof Error ? err : new Error(String(err)))
    }
  }, { maxInboundStreams: 8 })
  return host
}

/** Sends `text` on a new stream to the echo protocol and reads it back. */
async function echo (connection: Connection, text: string): Promise<string> {
  const stream = await connection.newStream(ECHO_PROTOCOL, { runOnLimitedConnection: true })
  stream.send(new TextEncoder().encode(text))
  await stream.close()
  let answer = ''
  for await (const chunk of stream) answer += new TextDecoder().decode(chunk.subarray())
  return answer
}

/** yamux's rtt on `connection`, -1 until its first keepalive ping is answered. Only then does a new stream's opening
 *  window update still go out after the stream was aborted (the condition of the crash). */
function yamuxRtt (connection: Connection): number {
  const muxer = (connection as unknown as { muxer?: { getRTT: () => number } }).muxer
  if (muxer == null) assert.fail('the connection is multiplexed by yamux')
  return muxer.getRTT()
}

/**
 * Dials `to` `rounds` times, each time opening a stream and aborting the connection in the same tick, then serves an
 * echo on a new connection. Returns what went uncaught meanwhile.
 */
async function openAndAbort (from: PeerHost, to: () => Multiaddr, rounds: number): Promise<unknown[]> {
  const uncaught: unknown[] = []
  const record = (err: unknown): void => { uncaught.push(err) }
  process.on('uncaughtException', record)
  try {
    for (let i = 0; i < rounds; i++) {
      const connection = await from.dial(to())
      await waitFor(() => yamuxRtt(connection) >= 0, { what: 'yamux to measure the rtt' })
      const opening = connection.newStream(ECHO_PROTOCOL, { runOnLimitedConnection: true })
      connection.abort(new Error('closed in the tick a stream opened on it'))
      await assert.rejects(opening)
      assert.equal(connection.status, 'aborted')
    }
    // Whatever yamux had queued has run by the time a new connection is dialed and has answered.
    const connection = await from.dial(to())
    assert.equal(await echo(connection, 'still serving'), 'still serving')
  } finally {
    process.off('uncaughtException', record)
  }
  return uncaught
}

test('a connection aborted in the tick a stream opens on it throws nothing uncaught, directly or through a relay; the hosts keep serving', { timeout: 120_000 }, async (t) => {
  // Direct: TCP on loopback. Without the guard in src/network/host/patches/libp2p-yamux.ts, each round ends in the
  // uncaught StreamStateError thrown from the microtask yamux queues in `onCreateStream`.
  const a = await startHost(t, { listen: ['/ip4/127.0.0.1/tcp/0'] })
  const b = await startHost(t, { listen: ['/ip4/127.0.0.1/tcp/0'] })
  assert.deepEqual(await openAndAbort(a, () => b.getMultiaddrs()[0], 8), [])

  // Through a relay: both hosts hold a reservation and reach each other only at their circuit addresses.
  const relay = await startRelay({ port: 0, log })
  t.after(async () => { await relay.stop() })
  const c = await startHost(t, { listen: [], relayUrl: relay.url })
  const d = await startHost(t, { listen: [], relayUrl: relay.url })
  for (const host of [c, d]) await host.dial(relayMultiaddrFromUrl(relay.url, relay.peerId.toString()))
  const circuit = (host: PeerHost): Multiaddr | undefined => host.getMultiaddrs().find(addr => addr.toString().includes('/p2p-circuit'))
  await waitFor(() => circuit(d) != null, { what: 'a reservation on the relay', timeoutMs: 30_000 })
  assert.deepEqual(await openAndAbort(c, () => circuit(d) ?? assert.fail('the reservation was lost'), 4), [])
  assert.ok(c.getConnections(d.peerId).every(connection => connection.remoteAddr.toString().includes('/p2p-circuit')))
})

test('the frames dropped on a closed connection are only those nobody awaits', () => {
  // Window updates (open, acknowledge, reset, grow), ping answers and GoAway: sent where a throw goes uncaught.
  for (const flag of [0, 1, 2, 8]) assert.equal(isUnawaitedFrame({ type: 1, flag }), true, `window update, flag ${flag}`)
  assert.equal(isUnawaitedFrame({ type: 2, flag: 2 }), true, 'ping answer')
  assert.equal(isUnawaitedFrame({ type: 3, flag: 0 }), true, 'GoAway')
  // Data (the stream's send reports it), FIN (stream.close() rejects) and our own ping (ping() rejects) still throw.
  for (const flag of [0, 1, 2, 4]) assert.equal(isUnawaitedFrame({ type: 0, flag }), false, `data, flag ${flag}`)
  assert.equal(isUnawaitedFrame({ type: 1, flag: 4 }), false, 'FIN')
  assert.equal(isUnawaitedFrame({ type: 1, flag: 6 }), false, 'FIN with ACK')
  assert.equal(isUnawaitedFrame({ type: 2, flag: 1 }), false, 'ping')
})
