// The node at a glance: who it is, what it runs on, what it serves, who it knows, what it holds.
import type { JSX } from 'preact'
import { useEffect, useState } from 'preact/hooks'
import type { AppSnapshot } from '../../../src/http/schemas/app.ts'
import type { PageProps } from '../page.ts'
import { Copyable, Section } from '../components.tsx'
import { formatBytes, formatCredits, formatDuration } from '../format.ts'
import { useT, type MessageKey, type Translate } from '../i18n.ts'

/** Seconds since the snapshot was read, ticking, so uptime moves between reads. */
function useTicking (since: number): number {
  const [start] = useState(() => ({ at: Date.now(), since }))
  const [, setNow] = useState(0)
  useEffect(() => {
    const timer = setInterval(() => { setNow(Date.now()) }, 1000)
    return () => { clearInterval(timer) }
  }, [])
  if (start.since !== since) {
    start.at = Date.now()
    start.since = since
  }
  return since + Math.floor((Date.now() - start.at) / 1000)
}

type Gpu = AppSnapshot['hardware']['gpu']

/** Backends by the names their makers use; the same in every language. */
const BACKEND_NAMES: Record<string, string> = { cuda: 'CUDA', vulkan: 'Vulkan', metal: 'Metal', cpu: 'CPU' }

function backendName (backend: string): string {
  return BACKEND_NAMES[backend] ?? backend
}

const REACHABILITY_KEYS: Record<AppSnapshot['network']['reachability'], MessageKey> = {
  public: 'overview.reachabilityPublic',
  private: 'overview.reachabilityPrivate',
  unknown: 'overview.reachabilityUnknown'
}

/** What llama.cpp runs on, as one line: `CUDA (NVIDIA H100, 80.0 GB VRAM, 79.1 GB free)`, or `CPU: <why>`. */
function describeGpu (t: Translate, gpu: Gpu): string {
  if (gpu.backend == null) return t('overview.gpuDeciding', { requested: gpu.requested })
  const facts = [...gpu.devices]
  if (gpu.vramTotalBytes != null) facts.push(t('overview.vram', { total: formatBytes(gpu.vramTotalBytes), free: formatBytes(gpu.vramFreeBytes) }))
  const name = backendName(gpu.backend) + (facts.length === 0 ? '' : ` (${facts.join(', ')})`)
  return gpu.reason == null ? name : `${name}: ${gpu.reason}`
}

function describeModel (t: Translate, model: NonNullable<AppSnapshot['model']>): string {
  const facts = [t(model.status === 'loaded' ? 'status.loaded' : 'status.loading')]
  if (model.gpu != null && model.gpu.gpuLayers > 0) {
    facts.push(t('overview.gpuLayers', { layers: model.gpu.gpuLayers, total: model.gpu.totalLayers, backend: backendName(model.gpu.backend) }))
  }
  return `${model.modelID} (${facts.join(', ')})`
}

export function OverviewPage ({ snapshot }: PageProps): JSX.Element {
  const t = useT()
  const { node, hardware, model, peers, network, wallet, ptn, settings, keepAwake } = snapshot
  const uptime = useTicking(node.uptimeSeconds)
  // Every value is text built here from the snapshot's fields: an object handed to JSX would read "[object Object]"
  const rows: Array<[string, JSX.Element | string]> = [
    [t('overview.name'), <span data-testid='overview-name'>{node.name}</span>],
    [t('overview.nodeID'), <Copyable value={node.nodeID} label={t('overview.copyNodeID')} testID='overview-node-id' />],
    [t('overview.version'), node.version],
    [t('overview.uptime'), formatDuration(uptime)],
    [t('overview.hardware'), <span data-testid='overview-hardware'>{t('overview.hardwareValue', { cpu: hardware.cpu, cores: hardware.cores, memory: hardware.memoryGB })}</span>],
    [t('overview.runsOn'), <span data-testid='overview-runs-on'>{describeGpu(t, hardware.gpu)}</span>],
    // The operating system names only some GPUs without extra tools: a row where it named one, never a false "none"
    ...(hardware.gpu.detected == null ? [] : [[t('overview.gpuSeen'), hardware.gpu.detected] satisfies [string, string]]),
    [t('overview.model'), model == null ? t('overview.noModel') : describeModel(t, model)],
    [t('overview.peers'), t('overview.peersValue', { lan: peers.lan, wan: peers.wan })],
    [t('overview.reachability'), t(REACHABILITY_KEYS[network.reachability]) + (network.publicAddrs.length === 0 ? '' : ` (${network.publicAddrs.join(', ')})`)],
    [t('overview.balance'), <span data-testid='overview-balance'>{formatCredits(wallet.currentBalance)}</span>],
    [t('overview.ptn'), String(ptn.memberships)],
    [t('overview.networkAccess'), settings.allow_network_access ? t('overview.networkOn') : t('overview.networkOff')],
    [t('overview.keepAwake'), keepAwake.active ? (keepAwake.method == null ? t('common.on') : `${t('common.on')} (${keepAwake.method})`) : (keepAwake.reason ?? t('common.off'))]
  ]
  return (
    <Section title={t('overview.node')}>
      <dl class='facts' data-testid='overview'>
        {rows.map(([label, value]) => (
          <div key={label}>
            <dt>{label}</dt>
            <dd>{value}</dd>
          </div>
        ))}
      </dl>
    </Section>
  )
}
