// Wallet: the balance, earned and spent over time, the transactions a page at a time, and a send that asks first.
import type { JSX } from 'preact'
import { useCallback, useEffect, useState } from 'preact/hooks'
import type { PeerList } from '../../../src/http/schemas/peers.ts'
import type { SendResult, TransactionList, WalletSummary, WalletTransaction } from '../../../src/http/schemas/wallet.ts'
import { get, post } from '../api.ts'
import type { PageProps } from '../page.ts'
import { ConfirmDialog, DataTable, ErrorText, Field, Section, fieldError, useAction } from '../components.tsx'
import { formatCredits, formatTime, shortID } from '../format.ts'
import { useLanguage, useT, type MessageKey } from '../i18n.ts'
import { useLive } from '../live.ts'

const PAGE_SIZE = 20
/** The chart draws the newest this many transactions (the API's largest page). */
const CHART_TRANSACTIONS = 500

const TYPE_KEYS: Record<WalletTransaction['type'], MessageKey> = { earn: 'wallet.earn', spend: 'wallet.spend', grant: 'wallet.grant' }

export function WalletPage (_props: PageProps): JSX.Element {
  const t = useT()
  const [summary, setSummary] = useState<WalletSummary | null>(null)
  const [page, setPage] = useState(0)
  const [transactions, setTransactions] = useState<WalletTransaction[]>([])
  const [history, setHistory] = useState<WalletTransaction[]>([])
  const [peers, setPeers] = useState<PeerList['peers']>([])
  const [error, setError] = useState<unknown>(null)

  const reload = useCallback(() => {
    Promise.all([
      get<WalletSummary>('/v1/app/wallet'),
      get<TransactionList>(`/v1/app/wallet/transactions?limit=${PAGE_SIZE}&offset=${page * PAGE_SIZE}`),
      get<TransactionList>(`/v1/app/wallet/transactions?limit=${CHART_TRANSACTIONS}`),
      get<PeerList>('/v1/app/peers')
    ]).then(([s, list, all, peerList]) => {
      setSummary(s)
      setTransactions(list.transactions)
      setHistory(all.transactions)
      setPeers(peerList.peers)
      setError(null)
    }, setError)
  }, [page])
  useEffect(reload, [reload])
  useLive(['wallet.', 'peer.online', 'peer.offline'], reload, reload)

  const pages = summary == null ? 1 : Math.max(1, Math.ceil(summary.transactionCount / PAGE_SIZE))
  return (
    <>
      <ErrorText error={error} />
      {summary != null && (
        <Section title={t('wallet.summary')}>
          <dl class='facts stats'>
            <div><dt>{t('wallet.balance')}</dt><dd data-testid='wallet-balance'>{formatCredits(summary.currentBalance)}</dd></div>
            <div><dt>{t('wallet.earned')}</dt><dd>{formatCredits(summary.totalEarned)}</dd></div>
            <div><dt>{t('wallet.spent')}</dt><dd>{formatCredits(summary.totalSpent)}</dd></div>
            <div><dt>{t('wallet.count')}</dt><dd>{summary.transactionCount}</dd></div>
            <div><dt>{t('wallet.pending')}</dt><dd>{summary.pendingTransfers}</dd></div>
          </dl>
        </Section>
      )}
      <Section title={t('wallet.chart')}>
        <EarnedSpentChart transactions={history} />
      </Section>
      <SendForm peers={peers} onSent={reload} />
      <Section title={t('wallet.transactions')}>
        <DataTable testID='transactions-table' columns={[t('wallet.time'), t('wallet.type'), t('wallet.amount'), t('wallet.peer'), t('wallet.memo')]}>
          {transactions.map((tx) => <TransactionRow key={tx.id} tx={tx} peers={peers} />)}
        </DataTable>
        <div class='pager'>
          <button type='button' class='secondary small' disabled={page === 0} onClick={() => { setPage(page - 1) }}>{t('common.previous')}</button>
          <span>{t('common.page', { page: page + 1, pages })}</span>
          <button type='button' class='secondary small' disabled={page + 1 >= pages} onClick={() => { setPage(page + 1) }}>{t('common.next')}</button>
        </div>
      </Section>
    </>
  )
}

function TransactionRow ({ tx, peers }: { tx: WalletTransaction, peers: PeerList['peers'] }): JSX.Element {
  const t = useT()
  const language = useLanguage()
  const peerName = tx.peerID == null ? '—' : (peers.find((p) => p.nodeID === tx.peerID)?.name ?? shortID(tx.peerID))
  return (
    <tr>
      <td>{formatTime(tx.timestamp, language)}</td>
      <td>{t(TYPE_KEYS[tx.type])}</td>
      <td class={tx.type === 'spend' ? 'negative' : 'positive'}>{tx.type === 'spend' ? '−' : '+'}{formatCredits(tx.amount)}</td>
      <td title={tx.peerID ?? undefined}>{peerName}</td>
      <td>{tx.memo}</td>
    </tr>
  )
}

/** Cumulative earned (and grants) and spent, drawn as two lines over time. */
function EarnedSpentChart ({ transactions }: { transactions: WalletTransaction[] }): JSX.Element {
  const t = useT()
  const language = useLanguage()
  const ordered = [...transactions].sort((a, b) => Date.parse(a.timestamp) - Date.parse(b.timestamp))
  if (ordered.length < 2) return <p class='muted'>{t('wallet.chartEmpty')}</p>
  let earned = 0
  let spent = 0
  const points = ordered.map((tx) => {
    if (tx.type === 'spend') spent += tx.amount
    else earned += tx.amount
    return { at: Date.parse(tx.timestamp), earned, spent }
  })
  const width = 600
  const height = 200
  const pad = 8
  const start = points[0].at
  const span = Math.max(1, points[points.length - 1].at - start)
  const top = Math.max(earned, spent, 1)
  const x = (at: number): number => pad + ((at - start) / span) * (width - 2 * pad)
  const y = (value: number): number => height - pad - (value / top) * (height - 2 * pad)
  const line = (pick: (p: typeof points[number]) => number): string => points.map((p) => `${x(p.at).toFixed(1)},${y(pick(p)).toFixed(1)}`).join(' ')
  const label = t('wallet.chartLabel', {
    earned: formatCredits(earned), spent: formatCredits(spent), from: formatTime(ordered[0].timestamp, language), to: formatTime(ordered[ordered.length - 1].timestamp, language)
  })
  return (
    <figure class='chart'>
      <svg viewBox={`0 0 ${width} ${height}`} preserveAspectRatio='none' role='img' aria-label={label} data-testid='wallet-chart'>
        <line x1={pad} y1={height - pad} x2={width - pad} y2={height - pad} class='axis' vector-effect='non-scaling-stroke' />
        <polyline points={line((p) => p.earned)} class='line-earned' fill='none' vector-effect='non-scaling-stroke' />
        <polyline points={line((p) => p.spent)} class='line-spent' fill='none' vector-effect='non-scaling-stroke' />
      </svg>
      <div class='chart-axis muted' aria-hidden='true'>
        <span>{formatTime(ordered[0].timestamp, language)}</span>
        <span>{formatTime(ordered[ordered.length - 1].timestamp, language)}</span>
      </div>
      <figcaption>
        <span class='legend legend-earned'>{t('wallet.earnedLine', { n: formatCredits(earned) })}</span>
        <span class='legend legend-spent'>{t('wallet.spentLine', { n: formatCredits(spent) })}</span>
      </figcaption>
    </figure>
  )
}

function SendForm ({ peers, onSent }: { peers: PeerList['peers'], onSent: () => void }): JSX.Element {
  const t = useT()
  const [peerID, setPeerID] = useState('')
  const [amount, setAmount] = useState('')
  const [memo, setMemo] = useState('')
  const [confirming, setConfirming] = useState(false)
  const [result, setResult] = useState<SendResult | null>(null)
  const action = useAction()
  const peerName = peers.find((p) => p.nodeID === peerID.trim())?.name ?? shortID(peerID.trim())

  const confirm = (): void => {
    setConfirming(false)
    void action.run(async () => {
      const sent = await post<SendResult>('/v1/app/wallet/send', { peerID: peerID.trim(), amount: Number(amount), memo })
      setResult(sent)
      setAmount('')
      setMemo('')
      onSent()
    })
  }

  return (
    <Section title={t('wallet.send')}>
      <form class='inline-form' onSubmit={(event) => { event.preventDefault(); setResult(null); action.clear(); setConfirming(true) }}>
        <Field label={t('wallet.peer')} hint={t('wallet.peerHint')} error={fieldError(action.error, 'peerID')}>
          {({ id, describedBy, invalid }) => (
            <>
              <input id={id} required list='known-peers' value={peerID} aria-describedby={describedBy} aria-invalid={invalid} spellcheck={false}
                onInput={(event) => { setPeerID(event.currentTarget.value) }} />
              <datalist id='known-peers'>
                {peers.map((p) => <option key={p.nodeID} value={p.nodeID}>{p.name}</option>)}
              </datalist>
            </>
          )}
        </Field>
        <Field label={t('wallet.amount')} error={fieldError(action.error, 'amount')}>
          {({ id, describedBy, invalid }) => (
            <input id={id} required type='number' min='0.000001' step='0.000001' inputMode='decimal' value={amount}
              aria-describedby={describedBy} aria-invalid={invalid} onInput={(event) => { setAmount(event.currentTarget.value) }} />
          )}
        </Field>
        <Field label={t('wallet.memo')} error={fieldError(action.error, 'memo')}>
          {({ id, describedBy, invalid }) => (
            <input id={id} maxLength={256} value={memo} aria-describedby={describedBy} aria-invalid={invalid}
              onInput={(event) => { setMemo(event.currentTarget.value) }} />
          )}
        </Field>
        <button type='submit' disabled={action.busy}>{t('wallet.sendButton')}</button>
      </form>
      {['peerID', 'amount', 'memo'].every((f) => fieldError(action.error, f) == null) && <ErrorText error={action.error} />}
      {result != null && (
        <p role='status' data-testid='send-result'>{t('wallet.sent', { amount: formatCredits(result.amount), peer: peerName, balance: formatCredits(result.newBalance) })}</p>
      )}
      {confirming && (
        <ConfirmDialog title={t('wallet.confirmTitle')} confirmLabel={t('wallet.confirmSend')} onCancel={() => { setConfirming(false) }} onConfirm={confirm}>
          <p>{t('wallet.confirmBody', { amount: amount === '' ? '0' : amount, peer: peerName })}</p>
          <p><code>{peerID.trim()}</code></p>
        </ConfirmDialog>
      )}
    </Section>
  )
}
