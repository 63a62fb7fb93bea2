import type { Command } from 'commander'
import type { PeerList } from '../../http/schemas/peers.ts'
import { formatTable, print } from '../output.ts'
import { clientFor, withClientOptions } from './common.ts'

export function registerPeers (program: Command): void {
  withClientOptions(program.command('peers').description('list the peers this node is connected to'))
    .action(async (_options, command: Command) => {
      const { client, options } = clientFor(command)
      const list = await client.get<PeerList>('/v1/app/peers')
      // With no peer, what the node is doing about it: waiting on what is on, or how to turn something on
      const settings = list.peers.length === 0 ? (await client.get<{ settings: { cluster_enabled: boolean, wan_enabled: boolean } }>('/v1/app')).settings : null
      print(list, options.json, () => settings != null
        ? noPeers(settings)
        : formatTable(['node', 'name', 'type', 'status', 'model', 'latency', 'load', 'price/1k'],
          list.peers.map((p) => [
            p.nodeID, // whole: it is pasted into wallet send and ptn issue-cert
            p.name,
            p.type,
            p.status,
            p.model,
            p.latencyMs == null ? null : `${Math.round(p.latencyMs)} ms`,
            `${p.capacity.busySlots}/${p.capacity.slots}${p.capacity.queued > 0 ? ` +${p.capacity.queued}` : ''}`,
            p.pricePer1kTokens
          ])))
    })
}

function noPeers ({ cluster_enabled: lan, wan_enabled: wan }: { cluster_enabled: boolean, wan_enabled: boolean }): string {
  if (!lan && !wan) return 'No peers. Turn on the LAN cluster (meshnode config set cluster_enabled true) or WAN (wan_enabled, wan_relay_url).'
  const waiting = [lan ? 'LAN peers (nodes on this network with the same cluster_passcode)' : null, wan ? 'peers through the relay' : null]
  return `No peers yet: waiting for ${waiting.filter((w) => w != null).join(' and ')}.`
}
