// Two nodes behind NAT routers reach each other through a public relay, then directly once DCUtR has punched a hole,
// and a chat placed on one is answered by the other over the direct connection. Network namespaces of our own: a
// "public" one (the relay, and the routers' outside legs on a bridge), per NATed node a router and a home network, and
// a node with a public address of its own on the bridge. AutoNAT meanwhile: the public node learns that it is public,
// the NATed ones that they are private, and nobody's relay connection is cut by a dial-back.
// Needs root, iproute2 and iptables; skipped with a message otherwise.
//
// The routers are what a home router does (docs/PROTOCOLS.md, Hole punching): MASQUERADE, which keeps a connection's
// source port when it can (no --random), and a firewall that drops what arrives from outside unasked, rather than
// refusing it (a refusal, a TCP reset, would kill the first of the two simultaneous dials before the second opens
// the way).
import { test, type TestContext } from 'node:test'
import assert from 'node:assert/strict'
import { join } from 'node:path'
import { nodeIDToPeerId } from '../../src/network/host/peer-ids.ts'
import { addNetns, inNetns, ip, spawnInNetns, startNetnsNode, whyNatUnavailable, type NetnsNode, type NetnsProcess } from '../support/netns.ts'
import { tempDir, waitFor } from '../support/node.ts'
import { writeTinyGguf } from '../support/tiny-gguf.ts'

// Outside addresses must be public ones: DCUtR ignores private addresses, and AutoNAT tests only public ones (libp2p
// counts the documentation ranges and 100.64.0.0/10 as private; 100.128.0.0 and up are public). These exist only on
// the bridge inside the test's "public" namespace, which has no link to anything else.
const PUBLIC_NET = `100.${128 + (process.pid % 100)}.${(process.pid >> 8) % 250}`

interface Topology {
  publicNs: string
  relayIp: string
  /** One namespace per node, each behind its own NAT router. */
  homes: string[]
  /** A namespace on the public bridge, with a public address of its own (no NAT). */
  publicHost: { ns: string, ip: string }
}

/** The relay's namespace with a bridge, and `count` homes: a node's namespace behind a router namespace that NATs. */
async function buildNattedNetwork (t: TestContext, count: number): Promise<Topology> {
  const tag = (process.pid % 10000).toString(36)
  const publicNs = await addNetns(t, `mnpub${tag}`)
  await ip('-n', publicNs, 'link', 'add', 'br0', 'type', 'bridge')
  await ip('-n', publicNs, 'addr', 'add', `${PUBLIC_NET}.1/24`, 'dev', 'br0')
  await ip('-n', publicNs, 'link', 'set', 'br0', 'up')
  const homes: string[] = []
  for (let i = 1; i <= count; i++) {
    const router = await addNetns(t, `mnrt${tag}x${i}`)
    const home = await addNetns(t, `mnhm${tag}x${i}`)
    // The router's outside leg on the public bridge, its inside leg to the home.
    await ip('link', 'add', 'name', 'wan', 'netns', router, 'type', 'veth', 'peer', 'name', `w${i}`, 'netns', publicNs)
    await ip('-n', publicNs, 'link', 'set', `w${i}`, 'master', 'br0', 'up')
    await ip('-n', router, 'addr', 'add', `${PUBLIC_NET}.${10 + i}/24`, 'dev', 'wan')
    await ip('-n', router, 'link', 'set', 'wan', 'up')
    await ip('link', 'add', 'name', 'lan', 'netns', router, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', home)
    await ip('-n', router, 'addr', 'add', `10.79.${i}.1/24`, 'dev', 'lan')
    await ip('-n', router, 'link', 'set', 'lan', 'up')
    await ip('-n', home, 'addr', 'add', `10.79.${i}.2/24`, 'dev', 'eth0')
    await ip('-n', home, 'link', 'set', 'eth0', 'up')
    await ip('-n', home, 'route', 'add', 'default', 'via', `10.79.${i}.1`)
    await inNetns(router, 'sysctl', '-q', '-w', 'net.ipv4.ip_forward=1')
    await inNetns(router, 'iptables', '-t', 'nat', '-A', 'POSTROUTING', '-o', 'wan', '-j', 'MASQUERADE')
    await inNetns(router, 'iptables', '-A', 'INPUT', '-i', 'wan', '-j', 'DROP')
    await inNetns(router, 'iptables', '-A', 'FORWARD', '-i', 'wan', '-m', 'conntrack', '--ctstate', 'NEW,INVALID', '-j', 'DROP')
    homes.push(home)
  }
  const publicHost = { ns: await addNetns(t, `mnph${tag}`), ip: `${PUBLIC_NET}.100` }
  await ip('link', 'add', 'name', 'eth0', 'netns', publicHost.ns, 'type', 'veth', 'peer', 'name', 'ph', 'netns', publicNs)
  await ip('-n', publicNs, 'link', 'set', 'ph', 'master', 'br0', 'up')
  await ip('-n', publicHost.ns, 'addr', 'add', `${publicHost.ip}/24`, 'dev', 'eth0')
  await ip('-n', publicHost.ns, 'link', 'set', 'eth0', 'up')
  return { publicNs, relayIp: `${PUBLIC_NET}.1`, homes, publicHost }
}

interface PeerView { nodeID: string, connection: string, status: string }

async function peersOf (node: NetnsNode): Promise<PeerView[]> {
  return (await node.api('GET', '/v1/app/peers') as { peers: PeerView[] }).peers
}

interface NetworkView { reachability: string, publicAddrs: string[] }

async function networkOf (node: NetnsNode): Promise<NetworkView> {
  return (await node.api('GET', '/v1/app') as { network: NetworkView }).network
}

/** The log line of a direct connection joining the relayed one to `peer` ("hole punched"), parsed, or undefined. */
function punchedTo (node: NetnsProcess, peer: NetnsNode): { relayed: string, direct: string } | undefined {
  const peerId = nodeIDToPeerId(peer.nodeID).toString()
  const line = node.output().split('\n').find(l => l.includes('hole punched') && l.includes(peerId))
  return line == null ? undefined : JSON.parse(line)
}

function count (text: string, needle: string): number {
  return text.split('\n').filter(line => line.includes(needle)).length
}

const skipReason = whyNatUnavailable()

test('NAT: two nodes behind NAT routers meet through the relay, DCUtR punches a direct connection, and a chat is answered over it; AutoNAT: a node with a public address learns public, the NATed ones private, and no relay connection is cut',
  { skip: skipReason == null ? false : `skipped: ${skipReason}` }, async (t) => {
    const net = await buildNattedNetwork(t, 2)
    // A fixed port: the namespace is ours alone. (With port 0 on a public address the relay cannot tell its port: libp2p
    // lists a public listen address only once AutoNAT has confirmed it.)
    const relay = await spawnInNetns<{ url: string }>(t, net.publicNs, ['relay', '--host', net.relayIp, '--port', '4001'], 'relay listening')
    const modelDir = await tempDir(t, 'meshnode-model-')
    const { path: modelPath } = await writeTinyGguf(join(modelDir, 'tiny-chat.gguf'), { seed: 7 })
    const listen = ['--p2p-listen', '/ip4/0.0.0.0/tcp/0']
    const [server, client, open] = await Promise.all([
      startNetnsNode(t, net.homes[0], [...listen, '--model', modelPath]),
      startNetnsNode(t, net.homes[1], listen),
      startNetnsNode(t, net.publicHost.ns, listen)
    ])
    // Neither home can reach the other: only the relay's public address is routed.
    await assert.rejects(inNetns(net.homes[1], 'ping', '-c', '1', '-W', '1', '10.79.1.2'))
    assert.deepEqual(await networkOf(client), { reachability: 'unknown', publicAddrs: [] }, 'nothing learned before the network is on')

    await Promise.all([server, client, open].map(async node => {
      await node.api('PATCH', '/v1/app/settings', { wan_enabled: true, wan_relay_url: relay.ready.url })
    }))

    // Relayed first: the only way they can meet. Then DCUtR joins a direct connection to the relayed one. A node logs it
    // when its direct connection opens beside the relayed one; the first to have the direct connection closes the
    // relayed one (DCUtR does), so on a busy machine the other's may open after it, unlogged: one line is enough, and
    // both nodes listing each other as direct (below) is the proof for both.
    let logged: { relayed: string, direct: string, router: string }
    try {
      logged = await waitFor(() => {
        const byClient = punchedTo(client, server)
        if (byClient != null) return { ...byClient, router: `${PUBLIC_NET}.11` }
        const byServer = punchedTo(server, client)
        return byServer == null ? undefined : { ...byServer, router: `${PUBLIC_NET}.12` }
      }, { timeoutMs: 120_000, intervalMs: 500, what: 'a direct connection to join the relayed one' })
    } catch (err) {
      t.diagnostic(`server:\n${server.output().slice(-6000)}\nclient:\n${client.output().slice(-6000)}`)
      throw err
    }
    assert.match(logged.relayed, /\/p2p-circuit/)
    assert.match(logged.direct, new RegExp(`^/ip4/${logged.router.replaceAll('.', '\\.')}/tcp/\\d+`), 'dialed at the other node\'s router, not through the relay')

    // The relayed connection is closed once the direct one is up; the peer table says so.
    await waitFor(async () => (await peersOf(client)).some(p => p.nodeID === server.nodeID && p.connection === 'direct'),
      { timeoutMs: 60_000, intervalMs: 500, what: 'the client to list the server as reached directly' })
    await waitFor(async () => (await peersOf(server)).some(p => p.nodeID === client.nodeID && p.connection === 'direct'),
      { timeoutMs: 60_000, intervalMs: 500, what: 'the server to list the client as reached directly' })

    // A chat on the client, whose engine has no model: answered by the server, over the direct connection.
    const models = await waitFor(async () => {
      const listed = (await client.api('GET', '/v1/models') as { data: Array<{ id: string }> }).data
      return listed.some(m => m.id === 'tiny-chat') ? listed : undefined
    }, { timeoutMs: 60_000, intervalMs: 500, what: 'the client to list the server\'s model' })
    assert.ok(models.some(m => m.id === 'tiny-chat'))
    const answer = await client.request('POST', '/v1/chat/completions', { model: 'tiny-chat', messages: [{ role: 'user', content: 'Hello' }], max_tokens: 8 })
    assert.equal(answer.status, 200, answer.text)
    assert.equal(answer.headers['x-served-by'], `peer:${server.nodeID}`)
    const body = JSON.parse(answer.text) as { choices: Array<{ message: { content: string } }>, usage: { completion_tokens: number } }
    assert.ok(body.usage.completion_tokens > 0)
    assert.equal(typeof body.choices[0].message.content, 'string')
    // Still direct after the answer: it went over the punched connection, not a new relayed one.
    assert.ok((await peersOf(client)).some(p => p.nodeID === server.nodeID && p.connection === 'direct'))

    // AutoNAT: the node with a public address of its own was dialed back there (by the relay, or a peer it asked);
    // the NATed ones were not (a dial-back to their public IP at their listen port meets the router's firewall).
    try {
      await waitFor(async () => (await networkOf(open)).reachability === 'public',
        { timeoutMs: 60_000, intervalMs: 500, what: 'the public node to learn it is public' })
      await waitFor(async () => (await networkOf(server)).reachability === 'private' && (await networkOf(client)).reachability === 'private',
        { timeoutMs: 60_000, intervalMs: 500, what: 'the NATed nodes to learn they are private' })
    } catch (err) {
      t.diagnostic(`public node:\n${open.output().slice(-6000)}\nclient:\n${client.output().slice(-6000)}`)
      throw err
    }
    const learned = await networkOf(open)
    assert.ok(learned.publicAddrs.length > 0 && learned.publicAddrs.every(addr => addr.startsWith(`/ip4/${net.publicHost.ip}/tcp/`)), learned.publicAddrs.join(' '))
    assert.deepEqual((await networkOf(client)).publicAddrs, [])
    // The relay answered dial-backs and asked its own: a node dialed it back at its public address.
    await waitFor(() => relay.output().includes('"reachability":"public"'),
      { timeoutMs: 60_000, intervalMs: 500, what: 'the relay to learn it is public' })
    // And no dial-back cut a relay connection: each node connected to the relay once and never lost it.
    for (const node of [server, client, open]) {
      assert.equal(count(node.output(), 'relay connection lost'), 0, node.output().slice(-4000))
      assert.equal(count(node.output(), 'connected to relay'), 1, node.output().slice(-4000))
    }
  })
