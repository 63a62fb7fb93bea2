// The node at a glance: who it is, what it runs on, what it serves, who it knows, what it holds.
import type { JSX } from 'preact'
import { useEffect, useState } from 'preact/hooks'
import type { PageProps } from '../app.tsx'
import { Copyable, Section } from '../components.tsx'
import { formatCredits, formatDuration } from '../format.ts'
import { useT } from '../i18n.ts'

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

export function OverviewPage ({ snapshot }: PageProps): JSX.Element {
  const t = useT()
  const { node, hardware, model, peers, wallet, ptn, settings, keepAwake } = snapshot
  const uptime = useTicking(node.uptimeSeconds)
  const rows: Array<[string, JSX.Element | string, string?]> = [
    [t('overview.name'), <span data-testid='overview-name'>{node.name}</span>],
    [t('overview.nodeID'), <Copyable value={node.nodeID} label={t('overview.copyNodeID')} testID='overview-node-id' />],
    [t('overview.version'), node.version],
    [t('overview.uptime'), formatDuration(uptime)],
    [t('overview.hardware'), t('overview.hardwareValue', { cpu: hardware.cpu, cores: hardware.cores, memory: hardware.memoryGB }) +
      (hardware.gpu == null ? '' : `, ${hardware.gpu}`)],
    [t('overview.model'), model == null ? t('overview.noModel') : `${model.modelID} (${t(model.status === 'loaded' ? 'status.loaded' : 'status.loading')})`],
    [t('overview.peers'), t('overview.peersValue', { lan: peers.lan, wan: peers.wan })],
    [t('overview.balance'), <span data-testid='overview-balance'>{formatCredits(wallet.currentBalance)}</span>],
    [t('overview.ptn'), String(ptn.memberships)],
    [t('overview.networkAccess'), settings.allow_network_access ? t('overview.networkOn') : t('overview.networkOff')],
    [t('overview.keepAwake'), keepAwake.active ? t('common.on') : (keepAwake.reason ?? t('common.off'))]
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
