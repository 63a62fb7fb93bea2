// A chat playground on POST /v1/chat/completions: streaming, a model picker with this node's model and the models
// peers serve (and who serves them), stop, tokens per second, and which node answered (X-Served-By).
import type { JSX } from 'preact'
import { useEffect, useRef, useState } from 'preact/hooks'
import type { PeerList } from '../../../src/http/schemas/peers.ts'
import { call, get, readSse } from '../api.ts'
import type { PageProps } from '../page.ts'
import { ErrorText, Field, Section } from '../components.tsx'
import { shortID } from '../format.ts'
import { useT } from '../i18n.ts'
import { useLive } from '../live.ts'

interface ModelOption { id: string, ownedBy: string }
interface Message { role: 'user' | 'assistant', content: string }
interface Stats { servedBy: string, tokens: number, tokensPerSecond: number | null, stopped: boolean }

interface ChunkBody {
  choices?: Array<{ delta?: { content?: string | null } }>
  usage?: { completion_tokens?: number } | null
  error?: { message?: string }
}

export function ChatPage ({ snapshot }: PageProps): JSX.Element {
  const t = useT()
  const [models, setModels] = useState<ModelOption[]>([])
  const [peerNames, setPeerNames] = useState<Map<string, string>>(new Map())
  const [model, setModel] = useState('')
  const [messages, setMessages] = useState<Message[]>([])
  const [draft, setDraft] = useState('')
  const [temperature, setTemperature] = useState('')
  const [maxTokens, setMaxTokens] = useState('')
  const [streaming, setStreaming] = useState(false)
  const [stats, setStats] = useState<Stats | null>(null)
  const [error, setError] = useState<unknown>(null)
  const controller = useRef<AbortController | null>(null)

  const loadModels = (): void => {
    Promise.all([get<{ data: Array<{ id: string, owned_by: string }> }>('/v1/models'), get<PeerList>('/v1/app/peers')]).then(([list, peers]) => {
      const options = list.data.map((m) => ({ id: m.id, ownedBy: m.owned_by }))
      setModels(options)
      setPeerNames(new Map(peers.peers.map((p) => [p.nodeID, p.name])))
      setModel((current) => options.some((o) => o.id === current) ? current : (options[0]?.id ?? ''))
    }, setError)
  }
  useEffect(loadModels, [])
  // A peer's record (and so the models it serves) changes as peer.updated
  useLive(['model.', 'peer.'], loadModels, loadModels)
  useEffect(() => () => { controller.current?.abort() }, [])

  const who = (servedBy: string): string => {
    if (servedBy === 'local') return t('chat.thisNode', { name: snapshot.node.name })
    const nodeID = servedBy.replace(/^peer:/, '')
    return t('chat.peer', { name: peerNames.get(nodeID) ?? shortID(nodeID) })
  }

  const send = async (): Promise<void> => {
    const history: Message[] = [...messages, { role: 'user', content: draft.trim() }]
    setMessages([...history, { role: 'assistant', content: '' }])
    setDraft('')
    setError(null)
    setStats(null)
    setStreaming(true)
    const abort = new AbortController()
    controller.current = abort
    let tokens = 0
    let first: number | null = null
    let last: number | null = null
    let servedBy = ''
    const update = (stopped: boolean): void => {
      const seconds = first != null && last != null && last > first ? (last - first) / 1000 : null
      setStats({ servedBy, tokens, tokensPerSecond: seconds == null || tokens < 2 ? null : (tokens - 1) / seconds, stopped })
    }
    try {
      const body: Record<string, unknown> = { model, messages: history, stream: true, stream_options: { include_usage: true } }
      // Empty fields leave the node's defaults; other values go as typed, and the node's 400 says what is wrong
      if (temperature.trim() !== '') body.temperature = Number(temperature)
      if (maxTokens.trim() !== '') body.max_tokens = Number(maxTokens)
      const response = await call('POST', '/v1/chat/completions', body, abort.signal)
      servedBy = response.headers.get('x-served-by') ?? ''
      for await (const { data } of readSse(response)) {
        if (data === '[DONE]') break
        const chunk = JSON.parse(data) as ChunkBody
        if (chunk.error != null) throw new Error(chunk.error.message ?? 'stream failed')
        const piece = chunk.choices?.[0]?.delta?.content
        if (piece != null && piece !== '') {
          const now = performance.now()
          first ??= now
          last = now
          tokens++
          setMessages((list) => list.map((m, i) => i === list.length - 1 ? { ...m, content: m.content + piece } : m))
        }
        if (chunk.usage?.completion_tokens != null) tokens = chunk.usage.completion_tokens
        update(false)
      }
      update(false)
    } catch (err) {
      if (abort.signal.aborted) update(true)
      else setError(err)
    } finally {
      setStreaming(false)
      controller.current = null
    }
  }

  const local = models.filter((m) => m.ownedBy === 'local')
  const remote = models.filter((m) => m.ownedBy !== 'local')
  return (
    <>
      <Section title={t('chat.settings')}>
        <Field label={t('chat.model')} hint={models.length === 0 ? t('chat.noModels') : undefined}>
          {({ id, describedBy }) => (
            <select id={id} value={model} aria-describedby={describedBy} onChange={(event) => { setModel(event.currentTarget.value) }}>
              {local.length > 0 && (
                <optgroup label={t('chat.localModels')}>
                  {local.map((m) => <option key={`l-${m.id}`} value={m.id}>{m.id}</option>)}
                </optgroup>
              )}
              {remote.length > 0 && (
                <optgroup label={t('chat.peerModels')}>
                  {remote.map((m) => <option key={`${m.ownedBy}-${m.id}`} value={m.id}>{`${m.id} — ${who(m.ownedBy)}`}</option>)}
                </optgroup>
              )}
            </select>
          )}
        </Field>
        <div class='inline-form'>
          <Field label={t('chat.temperature')} hint={t('chat.defaultHint')}>
            {({ id, describedBy }) => <input id={id} type='number' min='0' max='2' step='0.1' value={temperature} aria-describedby={describedBy}
              onInput={(e) => { setTemperature(e.currentTarget.value) }} />}
          </Field>
          <Field label={t('chat.maxTokens')} hint={t('chat.defaultHint')}>
            {({ id, describedBy }) => <input id={id} type='number' min='1' step='1' value={maxTokens} aria-describedby={describedBy}
              onInput={(e) => { setMaxTokens(e.currentTarget.value) }} />}
          </Field>
        </div>
      </Section>
      <Section title={t('chat.conversation')} actions={
        <button type='button' class='secondary small' disabled={streaming || messages.length === 0} onClick={() => { setMessages([]); setStats(null) }}>
          {t('chat.clear')}
        </button>
      }>
        <ol class='messages' aria-busy={streaming} data-testid='chat-messages'>
          {messages.map((m, i) => (
            <li key={i} class={`message ${m.role}`}>
              <span class='role'>{m.role === 'user' ? t('chat.you') : t('chat.assistant')}</span>
              <p data-testid={m.role === 'assistant' ? 'assistant-message' : undefined}>{m.content === '' && streaming ? '…' : m.content}</p>
            </li>
          ))}
        </ol>
        {stats != null && (
          <p class='muted' role='status' data-testid='chat-stats'>
            {stats.servedBy !== '' && <span data-testid='served-by'>{t('chat.answeredBy', { who: who(stats.servedBy) })}</span>}
            {' · '}{t('chat.tokens', { n: stats.tokens })}
            {stats.tokensPerSecond != null && <> {' · '}{t('chat.rate', { rate: stats.tokensPerSecond.toFixed(1) })}</>}
            {stats.stopped && <> {' · '}{t('chat.stopped')}</>}
          </p>
        )}
        <ErrorText error={error} />
        <form class='chat-form' onSubmit={(event) => { event.preventDefault(); if (!streaming && draft.trim() !== '' && model !== '') void send() }}>
          <Field label={t('chat.message')}>
            {({ id }) => (
              <textarea id={id} rows={3} value={draft} onInput={(event) => { setDraft(event.currentTarget.value) }}
                onKeyDown={(event) => {
                  if (event.key === 'Enter' && !event.shiftKey) {
                    event.preventDefault()
                    event.currentTarget.form?.requestSubmit()
                  }
                }} />
            )}
          </Field>
          <div class='actions'>
            {streaming
              ? <button type='button' class='danger' onClick={() => { controller.current?.abort() }}>{t('chat.stop')}</button>
              : <button type='submit' disabled={model === '' || draft.trim() === ''}>{t('chat.send')}</button>}
          </div>
        </form>
      </Section>
    </>
  )
}
