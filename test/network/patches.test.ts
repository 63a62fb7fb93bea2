// Each patch a host makes to a libp2p module's private internals (src/network/host/patches/, docs/UPGRADING.md) is
// active at the pinned version, and does what it exists for: in memory, on stream pairs and fake components, or on
// loopback. After an upgrade, a patch that no longer finds the shape it was written for reports itself inactive; its
// test here then fails, naming what it found, instead of the node quietly losing a crash guard or its hole punching.
import { test, type TestContext } from 'node:test'
import assert from 'node:assert/strict'
import { readFileSync } from 'node:fs'
import { createServer, type Server } from 'node:net'
import { join } from 'node:path'
import { noise } from '@chainsafe/libp2p-noise'
import { autoNATv2 } from '@libp2p/autonat-v2'
import type { Connection, DialOptions, Libp2p, Logger, MultiaddrConnection, PeerId, Startable, Stream, StreamHandler, Topology, Upgrader } from '@libp2p/interface'
import { peerIdFromPrivateKey } from '@libp2p/peer-id'
import { tcp } from '@libp2p/tcp'
import { multiaddrConnectionPair, pbStream, streamPair } from '@libp2p/utils'
import { multiaddr, type Multiaddr } from '@multiformats/multiaddr'
import { createLibp2p } from 'libp2p'
import { pino } from 'pino'
import { generateSeed, identityFromSeed } from '../../src/identity/index.ts'
import { HolePunch } from '../../src/network/host/hole-punch.ts'
import { hostPatches } from '../../src/network/host/libp2p-node.ts'
import { AUTONAT_DIAL_REQUEST_PROTOCOL, viewedAutonatV2, type AutonatViews } from '../../src/network/host/patches/libp2p-autonat-v2.ts'
import { privateKeyFromIdentity } from '../../src/network/host/patches/libp2p-crypto.ts'
import { DCUTR_DIAL_PRIORITY, DCUTR_PROTOCOL, punchingTcp, type DcutrComponents, type TcpComponents } from '../../src/network/host/patches/libp2p-dcutr.ts'
import { yamux } from '../../src/network/host/patches/libp2p-yamux.ts'
import { missingText } from '../../src/network/host/patches/shape.ts'
import { ReachabilityMonitor } from '../../src/network/host/reachability.ts'
import { waitFor } from '../support/node.ts'

const root = join(import.meta.dirname, '..', '..')
const log = pino({ level: process.env.MESHNODE_TEST_LOG ?? 'silent' })

function pinned (): Record<string, string> {
  const manifest = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { dependencies: Record<string, string> }
  return manifest.dependencies
}

/** A libp2p logger that writes nothing. */
function silentLogger (): Logger {
  return Object.assign(() => {}, { enabled: false, error: () => {}, trace: () => {}, newScope: () => silentLogger() })
}

function peerId (): PeerId {
  return peerIdFromPrivateKey(privateKeyFromIdentity(identityFromSeed(generateSeed())))
}

/** A file of an installed package that it does not export, imported as the package itself imports it. */
async function packageModule (name: string, path: string): Promise<unknown> {
  return await import(new URL(path, import.meta.resolve(name)).href)
}

interface Codec<T> { encode: (value: T) => Uint8Array, decode: (bytes: Uint8Array | { subarray: () => Uint8Array }) => T }

/** Whether `promise` has settled by the time the tasks queued now have run. */
async function settledSoon (promise: Promise<unknown>): Promise<boolean> {
  let settled = false
  void promise.then(() => { settled = true }, () => { settled = true })
  await new Promise((resolve) => setImmediate(resolve))
  return settled
}

await test('every patch of the host\'s dependencies is reported, active, against the pinned versions', async () => {
  const reports = await hostPatches()
  assert.deepEqual(reports.map((patch) => patch.name), [
    'unawaited-frames-dropped', 'punch-port', 'responder-role', 'punch-address', 'public-address-first',
    'dial-back-failures', 'address-view', 'dial-back-limit', 'dial-back-tracking', 'raw-ed25519-key'
  ])
  const pins = pinned()
  for (const patch of reports) {
    for (const dependency of patch.dependency.split(', ')) {
      const [name, version] = dependency.split(' ')
      assert.equal(version, pins[name], `${patch.name}: ${name} is the pinned version`)
    }
    assert.ok(patch.reason.length > 0, `${patch.name} says why it exists`)
    assert.equal(patch.active, true, `${patch.name} did not apply to ${patch.dependency}: ${patch.detail ?? ''}`)
  }
})

await test('a patch that finds another shape says what it found, naming the package, the file and the text', () => {
  assert.equal(missingText('@libp2p/dcutr', 'dist/src/dcutr.js', ['const DCUTR_DIAL_PRIORITY = 100;']), null)
  // the same statement reformatted still matches; another value does not
  assert.equal(missingText('@libp2p/dcutr', 'dist/src/dcutr.js', ['const   DCUTR_DIAL_PRIORITY =\n 100;']), null)
  assert.equal(missingText('@libp2p/dcutr', 'dist/src/dcutr.js', ['const DCUTR_DIAL_PRIORITY = 101;']),
    '@libp2p/dcutr dist/src/dcutr.js no longer has "const DCUTR_DIAL_PRIORITY = 101;"')
  assert.equal(missingText('@libp2p/dcutr', 'dist/src/gone.js', ['anything']), '@libp2p/dcutr has no dist/src/gone.js')
})

await test('unawaited-frames-dropped: a connection aborted in the tick a stream opens on it throws nothing uncaught; awaited frames still throw', async () => {
  const uncaught: unknown[] = []
  const record = (err: unknown): void => { uncaught.push(err) }
  process.on('uncaughtException', record)
  try {
    const [outbound, inbound] = multiaddrConnectionPair()
    const client = yamux()().createStreamMuxer(outbound)
    yamux()().createStreamMuxer(inbound)
    // Only once yamux knows the rtt does a new stream's opening window update still go out after an abort.
    const rtt = (): number => (client as unknown as { getRTT: () => number }).getRTT()
    await waitFor(() => rtt() >= 0, { what: 'yamux to measure the rtt' })
    const opening = client.createStream()
    outbound.abort(new Error('closed in the tick a stream opened on it'))
    await opening.catch(() => {})
    // the muxer's own control frames: a window update and a GoAway are dropped; data and a FIN still throw
    const sendFrame = (client as unknown as { sendFrame: (header: object, data?: Uint8Array) => boolean }).sendFrame
    assert.equal(sendFrame({ type: 1, flag: 0, streamID: 1, length: 0 }), false)
    assert.equal(sendFrame({ type: 3, flag: 0, streamID: 0, length: 0 }), false)
    assert.throws(() => sendFrame({ type: 0, flag: 0, streamID: 1, length: 1 }, new Uint8Array(1)), { name: 'StreamStateError' })
    assert.throws(() => sendFrame({ type: 1, flag: 4, streamID: 1, length: 0 }), { name: 'StreamStateError' })
    await new Promise((resolve) => setImmediate(resolve))
  } finally {
    process.off('uncaughtException', record)
  }
  assert.deepEqual(uncaught, [])
})

async function listening (t: TestContext, onConnection: (remotePort: number) => void = () => {}): Promise<Server> {
  const server = createServer((socket) => {
    onConnection(socket.remotePort ?? -1)
    socket.destroy()
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.after(() => new Promise<void>((resolve) => { server.close(() => { resolve() }) }))
  return server
}

function portOf (server: Server): number {
  const address = server.address()
  if (address == null || typeof address === 'string') assert.fail('the server listens on a port')
  return address.port
}

async function freePort (t: TestContext): Promise<number> {
  const server = await listening(t)
  const port = portOf(server)
  await new Promise<void>((resolve) => { server.close(() => { resolve() }) })
  return port
}

await test('punch-port: a dial at DCUtR\'s priority leaves from the punch port, through libp2p\'s dial queue and TCP', async (t) => {
  const punchPort = await freePort(t)
  const ports: number[] = []
  const b = await createLibp2p({
    addresses: { listen: ['/ip4/127.0.0.1/tcp/0'] }, transports: [tcp()], connectionEncrypters: [noise()], streamMuxers: [yamux()]
  })
  t.after(async () => { await b.stop() })
  b.addEventListener('connection:open', (evt) => { ports.push(Number(evt.detail.remoteAddr.getComponents().find(c => c.name === 'tcp')?.value)) })
  const a: Libp2p = await createLibp2p({
    transports: [punchingTcp(punchPort)],
    connectionEncrypters: [noise()],
    streamMuxers: [yamux()]
  })
  t.after(async () => { await a.stop() })
  const plain = await a.dial(b.getMultiaddrs()[0])
  await waitFor(() => ports.length === 1, { what: 'the plain dial to arrive' })
  assert.notEqual(ports[0], punchPort, 'a plain dial leaves from a port of its own')
  await plain.close()
  await a.dial(b.getMultiaddrs()[0], { priority: DCUTR_DIAL_PRIORITY, force: true } as DialOptions)
  await waitFor(() => ports.length === 2, { what: 'the punching dial to arrive' })
  assert.equal(ports[1], punchPort, 'DCUtR\'s dial leaves from the punch port')
})

await test('responder-role: the side that opened the DCUtR stream dials as the answering side; others as the dialer', async (t) => {
  const punchPort = await freePort(t)
  const remote = peerId()
  const arrived: number[] = []
  const targets = [await listening(t, (port) => arrived.push(port)), await listening(t, (port) => arrived.push(port)), await listening(t, (port) => arrived.push(port))]
  let connections: Connection[] = []
  const transport = punchingTcp(punchPort)({
    logger: { forComponent: () => silentLogger() },
    connectionManager: { getConnections: () => connections }
  } as unknown as TcpComponents)
  const upgrades: Array<{ direction: string, initiator: unknown }> = []
  const upgrader = {
    upgradeOutbound: async (maConn: MultiaddrConnection, options: { initiator?: boolean }) => {
      upgrades.push({ direction: maConn.direction, initiator: options.initiator })
      maConn.abort(new Error('upgrade not needed here'))
      return {} as Connection
    }
  } as unknown as Upgrader
  const dial = async (server: Server, priority?: number): Promise<void> => {
    await transport.dial(multiaddr(`/ip4/127.0.0.1/tcp/${portOf(server)}/p2p/${remote.toString()}`),
      { upgrader, signal: AbortSignal.timeout(10_000), ...(priority == null ? {} : { priority }) } as Parameters<typeof transport.dial>[1])
  }
  // a relayed connection to the remote peer on which we opened DCUtR's stream: we are the side that answers
  const relayed = {
    remotePeer: remote,
    remoteAddr: multiaddr(`/ip4/5.6.7.8/tcp/4001/p2p/${peerId().toString()}/p2p-circuit/p2p/${remote.toString()}`),
    streams: [{ protocol: DCUTR_PROTOCOL, direction: 'outbound' }]
  } as unknown as Connection
  await dial(targets[0], DCUTR_DIAL_PRIORITY)
  connections = [relayed]
  await dial(targets[1], DCUTR_DIAL_PRIORITY)
  await dial(targets[2])
  await waitFor(() => arrived.length === 3, { what: 'the three dials to arrive' })
  assert.deepEqual(upgrades, [
    { direction: 'outbound', initiator: undefined },
    { direction: 'inbound', initiator: false },
    { direction: 'outbound', initiator: undefined }
  ])
  assert.deepEqual(arrived.slice(0, 2), [punchPort, punchPort])
  assert.notEqual(arrived[2], punchPort)
})

interface FakeRegistrar {
  handlers: Map<string, StreamHandler>
  topologies: Map<string, Topology>
}

function fakeRegistrar (): FakeRegistrar & { registrar: object } {
  const handlers = new Map<string, StreamHandler>()
  const topologies = new Map<string, Topology>()
  return {
    handlers,
    topologies,
    registrar: {
      handle: async (protocol: string, handler: StreamHandler) => { handlers.set(protocol, handler) },
      unhandle: async () => {},
      register: async (protocol: string, topology: Topology) => { topologies.set(protocol, topology); return protocol },
      unregister: () => {}
    }
  }
}

/** DCUtR as a host's HolePunch gives it, on fake components: what it dials and what it asks of the peer store. */
async function startDcutr (t: TestContext, holePunch: HolePunch, self: PeerId): Promise<FakeRegistrar & { dials: Array<{ addrs: string[], priority: unknown }>, lookups: string[] }> {
  const { registrar, handlers, topologies } = fakeRegistrar()
  const dials: Array<{ addrs: string[], priority: unknown }> = []
  const lookups: string[] = []
  const service = holePunch.dcutr()({
    peerId: self,
    logger: { forComponent: () => silentLogger() },
    registrar,
    addressManager: { getAddresses: () => [multiaddr(`/ip4/127.0.0.1/tcp/4001/p2p/${self.toString()}`)] },
    connectionManager: {
      openConnection: async (addrs: Multiaddr[], options: { priority?: number }) => {
        dials.push({ addrs: addrs.map(String), priority: options.priority })
        return { remoteAddr: addrs[0] }
      }
    },
    transportManager: { dialTransportForMultiaddr: () => ({}) },
    peerStore: { get: async (peer: PeerId) => { lookups.push(peer.toString()); return { addresses: [] } } }
  } as unknown as DcutrComponents) as Startable
  await service.start()
  t.after(async () => { await service.stop() })
  return { handlers, topologies, dials, lookups }
}

function relayedFrom (remote: PeerId, direction: 'inbound' | 'outbound'): Connection {
  return {
    remotePeer: remote,
    remoteAddr: multiaddr(`/ip4/5.6.7.8/tcp/4001/p2p/${peerId().toString()}/p2p-circuit`),
    direction,
    status: 'open',
    limits: {},
    streams: [],
    newStream: async () => { throw new Error('no stream in this test') },
    close: async () => {}
  } as unknown as Connection
}

/** A public peer saw us at `ip` (identify on a direct connection). */
function seenAt (holePunch: HolePunch, ip: string): void {
  holePunch.observed({ observedAddr: multiaddr(`/ip4/${ip}/tcp/50000`), connection: { remoteAddr: multiaddr('/ip4/9.9.9.9/tcp/4001') } as unknown as Connection })
}

await test('punch-address: DCUtR offers our public punch address, and dials the other side at its own priority', async (t) => {
  const holePunch = await HolePunch.create({ log })
  const self = peerId()
  const remote = peerId()
  seenAt(holePunch, '5.6.7.9')
  const dcutr = await startDcutr(t, holePunch, self)
  const handler = dcutr.handlers.get(DCUTR_PROTOCOL)
  assert.ok(handler != null, 'DCUtR answers its protocol')
  const { HolePunch: message } = await packageModule('@libp2p/dcutr', './pb/message.js') as { HolePunch: Codec<{ type?: string, observedAddresses: Uint8Array[] }> }
  const [ours, theirs] = await streamPair()
  const answered = handler(theirs, relayedFrom(remote, 'outbound'))
  const messages = pbStream(ours).pb(message)
  await messages.write({ type: 'CONNECT', observedAddresses: [multiaddr(`/ip4/1.2.3.4/tcp/4001/p2p/${remote.toString()}`).bytes] })
  const connect = await messages.read()
  assert.equal(connect.type, 'CONNECT')
  const offered = connect.observedAddresses.map((bytes) => multiaddr(bytes).toString())
  assert.ok(offered.includes(`/ip4/5.6.7.9/tcp/${holePunch.port}/p2p/${self.toString()}`), `our punch address is offered: ${offered.join(', ')}`)
  await messages.write({ type: 'SYNC', observedAddresses: [] })
  await answered
  assert.deepEqual(dcutr.dials, [{ addrs: [`/ip4/1.2.3.4/tcp/4001/p2p/${remote.toString()}`], priority: DCUTR_DIAL_PRIORITY }])
})

await test('public-address-first: DCUtR acts on a relayed connection it accepted only once we know a public address', async (t) => {
  const holePunch = await HolePunch.create({ log })
  const remote = peerId()
  const dcutr = await startDcutr(t, holePunch, peerId())
  const topology = dcutr.topologies.get(DCUTR_PROTOCOL)
  assert.ok(topology?.onConnect != null, 'DCUtR is told of connections')
  const waiting = Promise.resolve(topology.onConnect(remote, relayedFrom(remote, 'inbound')))
  assert.equal(await settledSoon(waiting), false, 'it waits for our public address')
  assert.deepEqual(dcutr.lookups, [])
  seenAt(holePunch, '5.6.7.9')
  await waiting
  await waitFor(() => dcutr.lookups.length > 0, { what: 'DCUtR to start the upgrade' })
  assert.deepEqual(dcutr.lookups, [remote.toString()])
})

/** autonat-v2 on fake components, with one public TCP address of ours and a circuit one, neither verified. */
async function startAutonat (t: TestContext, service: (components: never) => unknown): Promise<FakeRegistrar & { dialed: Array<{ force: unknown }> }> {
  const { registrar, handlers, topologies } = fakeRegistrar()
  const dialed: Array<{ force: unknown }> = []
  const addresses = [
    { multiaddr: multiaddr('/ip4/5.6.7.9/tcp/4001'), type: 'ip-mapping', verified: false, expires: 0 },
    { multiaddr: multiaddr(`/ip4/9.9.9.9/tcp/4001/p2p/${peerId().toString()}/p2p-circuit`), type: 'transport', verified: false, expires: 0 }
  ]
  const started = service({
    logger: { forComponent: () => silentLogger() },
    registrar,
    addressManager: { getAddressesWithMetadata: () => addresses, confirmObservedAddr: () => {}, removeObservedAddr: () => {} },
    connectionManager: {
      getConnections: () => [],
      getMaxConnections: () => 100,
      isDialable: async () => true,
      openConnection: async (_peer: unknown, options: { force?: boolean }) => { dialed.push({ force: options.force }); throw new Error('unreachable in this test') }
    },
    randomWalk: { walk: async function * () {} },
    peerStore: { get: async () => ({ addresses: [], protocols: [] }) }
  } as never) as Startable
  await started.start()
  t.after(async () => { await started.stop() })
  return { handlers, topologies, dialed }
}

interface AutonatMessage {
  dialRequest?: { addrs: Uint8Array[], nonce: bigint }
  dialResponse?: { status: number, addrIdx: number, dialStatus: number }
}

async function autonatCodec (): Promise<{ message: Codec<AutonatMessage>, ok: number, dialError: number, refused: number }> {
  const pb = await packageModule('@libp2p/autonat-v2', './pb/index.js') as {
    Message: Codec<AutonatMessage>
    DialStatus: Record<string, number>
    DialResponse: { ResponseStatus: Record<string, number> }
  }
  return { message: pb.Message, ok: pb.DialResponse.ResponseStatus.OK, dialError: pb.DialStatus.E_DIAL_ERROR, refused: pb.DialResponse.ResponseStatus.E_DIAL_REFUSED }
}

function directFrom (remote: PeerId, stream?: Stream): Connection {
  return {
    remotePeer: remote,
    remoteAddr: multiaddr('/ip4/1.2.3.4/tcp/4001'),
    direct: true,
    direction: 'inbound',
    status: 'open',
    streams: [],
    newStream: async () => stream ?? assert.fail('no stream in this test')
  } as unknown as Connection
}

await test('dial-back-failures, address-view, dial-back-tracking: one failed dial-back makes the node private; circuit addresses are not sent; the asked peer\'s dial-back is expected', async (t) => {
  const reachability = new ReachabilityMonitor({ log })
  const autonat = await startAutonat(t, reachability.autonat(autoNATv2))
  const { message, ok, dialError } = await autonatCodec()
  const asked = peerId()
  const topology = autonat.topologies.get(AUTONAT_DIAL_REQUEST_PROTOCOL)
  assert.ok(topology?.onConnect != null, 'the client is told of peers that answer dial requests')
  assert.equal(reachability.isDialBack({ direct: true, direction: 'inbound', remotePeer: asked }), false)
  const [ours, theirs] = await streamPair()
  await topology.onConnect(asked, directFrom(asked, ours))
  // the peer asked: it reads the request and could not dial us back
  const messages = pbStream(theirs).pb(message)
  const { dialRequest } = await messages.read()
  assert.deepEqual(dialRequest?.addrs.map((bytes) => multiaddr(bytes).toString()), ['/ip4/5.6.7.9/tcp/4001'], 'the circuit address is not sent')
  assert.equal(reachability.isDialBack({ direct: true, direction: 'inbound', remotePeer: asked }), true, 'a dial-back from the asked peer is expected')
  await messages.write({ dialResponse: { status: ok, addrIdx: 0, dialStatus: dialError } })
  await waitFor(() => reachability.status().reachability === 'private', { what: 'the failed dial-back to be seen', timeoutMs: 10_000 })
})

await test('dial-back-limit, dial-back-tracking: the server counts its dial-backs and the requests it answers, and refuses one over the limit', async (t) => {
  const answering: string[] = []
  const dialingBack: number[] = []
  let allowed = true
  const views: AutonatViews = {
    testable: () => true,
    addressesChanged: () => {},
    dialBackFailed: () => {},
    mayDialBack: () => allowed,
    dialingBack: async (dial) => { dialingBack.push(1); return await dial() },
    answering: async (peer, answer) => { answering.push(peer); await answer() },
    asking: () => {}
  }
  const autonat = await startAutonat(t, viewedAutonatV2(autoNATv2, {}, views))
  const { message, ok, refused, dialError } = await autonatCodec()
  const handler = autonat.handlers.get(AUTONAT_DIAL_REQUEST_PROTOCOL)
  assert.ok(handler != null, 'the server answers dial requests')
  const ask = async (): Promise<AutonatMessage['dialResponse']> => {
    const asking = peerId()
    const [ours, theirs] = await streamPair()
    const answered = handler(theirs, directFrom(asking))
    const messages = pbStream(ours).pb(message)
    // an address at the asking connection's own IP: dialed back without the anti-amplification exchange
    await messages.write({ dialRequest: { addrs: [multiaddr('/ip4/1.2.3.4/tcp/4001').bytes], nonce: 1n } })
    const { dialResponse } = await messages.read()
    await answered
    assert.equal(answering.at(-1), asking.toString(), 'the request is known while it is answered')
    return dialResponse
  }
  assert.deepEqual(await ask(), { status: ok, addrIdx: 0, dialStatus: dialError })
  assert.deepEqual({ dialingBack, dialed: autonat.dialed }, { dialingBack: [1], dialed: [{ force: true }] })
  allowed = false
  assert.equal((await ask())?.status, refused)
  assert.deepEqual(dialingBack, [1], 'a refused request is not dialed back')
})
