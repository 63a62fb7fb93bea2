// Peers: who this node knows, how far they are, what they serve and for how much, and which PTNs they prove.
import type { JSX } from 'preact'
import { useCallback, useEffect, useState } from 'preact/hooks'
import type { PeerEntry, PeerList } from '../../../src/http/schemas/peers.ts'
import { get } from '../api.ts'
import type { PageProps } from '../page.ts'
import { CopyButton, DataTable, ErrorText, Section } from '../components.tsx'
import { formatCredits, shortID } from '../format.ts'
import { useT } from '../i18n.ts'
import { useLive } from '../live.ts'

export function PeersPage (_props: PageProps): JSX.Element {
  const t = useT()
  const [peers, setPeers] = useState<PeerEntry[] | null>(null)
  const [error, setError] = useState<unknown>(null)
  const reload = useCallback(() => {
    get<PeerList>('/v1/app/peers').then((list) => { setPeers(list.peers); setError(null) }, setError)
  }, [])
  useEffect(reload, [reload])
  useLive(['peer.'], reload, reload)

  return (
    <Section title={t('peers.title')}>
      <ErrorText error={error} />
      {peers != null && peers.length === 0 && <p>{t('peers.none')}</p>}
      {peers != null && peers.length > 0 && (
        <DataTable testID='peers-table' columns={[t('peers.name'), t('peers.type'), t('peers.latency'), t('peers.models'), t('peers.price'), t('peers.ptns'), t('peers.load')]}>
          {peers.map((peer) => (
            <tr key={peer.nodeID} data-node-id={peer.nodeID}>
              <th scope='row'>
                {peer.name}{peer.status === 'degraded' && <span class='status status-failed'> {t('peers.degraded')}</span>}
                <br /><code class='muted' title={peer.nodeID}>{shortID(peer.nodeID)}</code>{' '}
                <CopyButton text={peer.nodeID} label={t('peers.copyID')} />
              </th>
              <td>{peer.type === 'lan' ? 'LAN' : 'WAN'}</td>
              <td>{peer.latencyMs == null ? '—' : `${Math.round(peer.latencyMs)} ms`}</td>
              <td>
                {peer.models.length === 0
                  ? '—'
                  : <ul class='plain'>{peer.models.map((m) => <li key={m}>{m}{m === peer.model && <strong> ({t('status.loaded')})</strong>}</li>)}</ul>}
              </td>
              <td>{t('peers.priceValue', { price: formatCredits(peer.pricePer1kTokens) })}</td>
              <td>{peer.ptnIDs.length === 0 ? '—' : peer.ptnIDs.map((id) => <code key={id} title={id}>{shortID(id)} </code>)}</td>
              <td>{t('peers.loadValue', { busy: peer.capacity.busySlots, slots: peer.capacity.slots, queued: peer.capacity.queued })}</td>
            </tr>
          ))}
        </DataTable>
      )}
    </Section>
  )
}
