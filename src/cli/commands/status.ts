import type { Command } from 'commander'
import type { AppSnapshot } from '../../http/schemas/app.ts'
import { formatPairs, print } from '../output.ts'
import { clientFor, withClientOptions } from './common.ts'

export function registerStatus (program: Command): void {
  withClientOptions(program.command('status').description('show the node, its model, peers and wallet'))
    .action(async (_options, command: Command) => {
      const { client, options } = clientFor(command)
      const app = await client.get<AppSnapshot>('/v1/app')
      print(app, options.json, () => formatPairs([
        ['node', `${app.node.name} (${app.node.nodeID})`],
        ['version', app.node.version],
        ['uptime', `${app.node.uptimeSeconds}s`],
        ['hardware', `${app.hardware.cpu}, ${app.hardware.cores} cores, ${app.hardware.memoryGB} GB${app.hardware.gpu == null ? '' : ', ' + app.hardware.gpu}`],
        ['model', app.model == null ? null : `${app.model.modelID} (${app.model.status})`],
        ['models', app.models.length],
        ['peers', `${app.peers.lan} lan, ${app.peers.wan} wan`],
        ['balance', app.wallet.currentBalance],
        ['ptn memberships', app.ptn.memberships],
        ['network access', app.settings.allow_network_access ? 'on (API key required)' : 'off (loopback only)'],
        ['keep awake', app.keepAwake.active ? `on (${app.keepAwake.method ?? ''})` : (app.keepAwake.reason ?? 'off')]
      ]))
    })
}
