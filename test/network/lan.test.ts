// LAN cluster by mDNS, on a LAN of our own: network namespaces joined by a bridge, one node process in each. Needs
// root (and iproute2); skipped with a message otherwise. The namespaces exist on this machine only and are deleted
// when the test ends.
import { test, type TestContext } from 'node:test'
import assert from 'node:assert/strict'
import { ip, startNetnsNode, whyNetnsUnavailable, type NetnsNode } from '../support/netns.ts'
import { waitFor } from '../support/node.ts'

/** A bridge in its own namespace and `count` namespaces wired to it, each with 10.77.<pid>.<i>/24. */
async function buildLan (t: TestContext, count: number): Promise<string[]> {
  const tag = (process.pid % 10000).toString(36)
  const bridgeNs = `mnbr${tag}`
  const subnet = `10.77.${process.pid % 250}`
  await ip('netns', 'add', bridgeNs)
  t.after(() => ip('netns', 'del', bridgeNs))
  await ip('-n', bridgeNs, 'link', 'add', 'br0', 'type', 'bridge')
  await ip('-n', bridgeNs, 'link', 'set', 'br0', 'up')
  const namespaces: string[] = []
  for (let i = 1; i <= count; i++) {
    const ns = `mnn${tag}x${i}`
    await ip('netns', 'add', ns)
    t.after(() => ip('netns', 'del', ns))
    await ip('link', 'add', 'name', 'eth0', 'netns', ns, 'type', 'veth', 'peer', 'name', `p${i}`, 'netns', bridgeNs)
    await ip('-n', bridgeNs, 'link', 'set', `p${i}`, 'master', 'br0', 'up')
    await ip('-n', ns, 'link', 'set', 'lo', 'up')
    await ip('-n', ns, 'addr', 'add', `${subnet}.${i}/24`, 'dev', 'eth0')
    await ip('-n', ns, 'link', 'set', 'eth0', 'up')
    await ip('-n', ns, 'route', 'add', '224.0.0.0/4', 'dev', 'eth0')   // where mDNS queries go
    namespaces.push(ns)
  }
  return namespaces
}

async function lanPeers (node: NetnsNode): Promise<Array<{ nodeID: string, type: string }>> {
  return (await node.api('GET', '/v1/app/peers') as { peers: Array<{ nodeID: string, type: string }> }).peers
}

const skipReason = whyNetnsUnavailable()

test('LAN cluster: mDNS discovery in network namespaces; a wrong passcode is no cluster peer; off takes effect at once',
  { skip: skipReason == null ? false : `skipped: ${skipReason}` }, async (t) => {
    const namespaces = await buildLan(t, 3)
    const [alpha1, alpha2, beta] = await Promise.all(namespaces.map(async ns => await startNetnsNode(t, ns)))
    await Promise.all(([[alpha1, 'correct horse'], [alpha2, 'correct horse'], [beta, 'battery staple']] as const).map(async ([node, passcode]) => {
      await node.api('PATCH', '/v1/app/settings', { cluster_passcode: passcode, cluster_enabled: true })
    }))

    await waitFor(async () => {
      const [one, two] = await Promise.all([lanPeers(alpha1), lanPeers(alpha2)])
      return one.some(p => p.nodeID === alpha2.nodeID && p.type === 'lan') && two.some(p => p.nodeID === alpha1.nodeID && p.type === 'lan')
    }, { timeoutMs: 60_000, intervalMs: 300, what: 'the two nodes with the same passcode to be LAN peers' })
    assert.deepEqual((await alpha1.api('GET', '/v1/app')).peers, { lan: 1, wan: 0 })
    // Both found each other at once; one dialed, one handshake admitted both, and neither refused the other
    for (const [node, other] of [[alpha1, alpha2], [alpha2, alpha1]]) {
      const refusals = node.output().split('\n').filter((line) => line.includes(other.nodeID) && /not admitted|handshake failed/.test(line))
      assert.deepEqual(refusals, [], 'no failed handshake between the two')
    }
    // The CLI shows the same table.
    const listed = JSON.parse(await alpha1.cli('peers', '--json')) as { peers: Array<{ nodeID: string, type: string }> }
    assert.deepEqual(listed.peers.map(p => [p.nodeID, p.type]), [[alpha2.nodeID, 'lan']])
    assert.match(await alpha1.cli('peers'), new RegExp(`${alpha2.nodeID.slice(0, 16)}.*lan.*online`))

    // The third node was found by mDNS and tried: its handshake failed both ways, so it is nobody's peer.
    await waitFor(() => /not admitted to the cluster|cluster handshake failed/.test(beta.output()), { timeoutMs: 30_000, what: 'the wrong-passcode node to be refused' })
    assert.deepEqual(await lanPeers(beta), [])
    assert.ok(!(await lanPeers(alpha1)).some(p => p.nodeID === beta.nodeID))
    assert.ok(!(await lanPeers(alpha2)).some(p => p.nodeID === beta.nodeID))
    assert.ok(!/correct horse|battery staple/.test(alpha1.output() + alpha2.output() + beta.output()), 'no passcode in any log')

    // Off on one node: its peer loses it at once (no restart).
    await alpha2.api('PATCH', '/v1/app/settings', { cluster_enabled: false })
    await waitFor(async () => (await lanPeers(alpha1)).length === 0, { timeoutMs: 20_000, intervalMs: 300, what: 'the peer to drop the node that left' })
    assert.deepEqual(await lanPeers(alpha2), [])
    // The CLI says what each is doing about having no peer
    assert.match(await alpha1.cli('peers'), /No peers yet: waiting for LAN peers/)
    assert.match(await alpha2.cli('peers'), /No peers\. Turn on the LAN cluster/)
  })
