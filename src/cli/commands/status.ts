import type { Command } from 'commander'
import type { AppSnapshot } from '../../http/schemas/app.ts'
import { formatPairs, print } from '../output.ts'
import { clientFor, withClientOptions } from './common.ts'
import { describeLoaded } from './models.ts'

export function registerStatus (program: Command): void {
  withClientOptions(program.command('status').description('show the node, its model, peers and wallet'))
    .action(async (_options, command: Command) => {
      const { client, options } = clientFor(command)
      const app = await client.get<AppSnapshot>('/v1/app')
      print(app, options.json, () => formatPairs([
        ['node', `${app.node.name} (${app.node.nodeID})`],
        ['version', app.node.version],
        ['uptime', `${app.node.uptimeSeconds}s`],
        ['hardware', `${app.hardware.cpu}, ${app.hardware.cores} cores, ${app.hardware.memoryGB} GB`],
        ['runs on', describeGpu(app.hardware.gpu)],
        ['model', app.model == null ? null : `${app.model.modelID} (${app.model.status}${app.model.gpu == null || app.model.gpu.gpuLayers === 0 ? '' : `, ${app.model.gpu.gpuLayers}/${app.model.gpu.totalLayers} layers on ${app.model.gpu.backend}`})`],
        ['loaded', loadedModels(app)],
        ['models', app.models.length],
        ['peers', `${app.peers.lan} lan, ${app.peers.wan} wan`],
        ['reachability', app.network.publicAddrs.length === 0 ? app.network.reachability : `${app.network.reachability} (${app.network.publicAddrs.join(', ')})`],
        ['balance', app.wallet.currentBalance],
        ['ptn memberships', app.ptn.memberships],
        ['network access', app.settings.allow_network_access ? 'on (API key required)' : 'off (loopback only)'],
        ['keep awake', app.keepAwake.active ? `on (${app.keepAwake.method ?? ''})` : (app.keepAwake.reason ?? 'off')]
      ]))
    })
}

/** Every loaded model with what it does, one per line after the first. */
function loadedModels (app: AppSnapshot): string | null {
  const loaded = app.models.filter((model) => model.loaded != null)
  return loaded.length === 0 ? null : loaded.map((model) => `${model.modelID} (${model.loaded == null ? '' : describeLoaded(model.loaded)})`).join('\n')
}

function describeGpu (gpu: AppSnapshot['hardware']['gpu']): string {
  if (gpu.backend == null) return `deciding (--gpu ${gpu.requested})`
  const devices = gpu.devices.length === 0 ? '' : ` (${gpu.devices.join(', ')}${gpu.vramTotalBytes == null ? '' : `, ${(gpu.vramTotalBytes / 1e9).toFixed(1)} GB VRAM`})`
  return `${gpu.backend}${devices}${gpu.reason == null ? '' : `: ${gpu.reason}`}`
}
