// Models: the catalog and what is here, downloads with live progress (bytes, rate, ETA), load and unload, a file
// already on disk imported, and the storage downloads use against max_storage_gb.
import type { JSX } from 'preact'
import { useCallback, useEffect, useState } from 'preact/hooks'
import type { ModelRecord } from '../../../src/http/schemas/app.ts'
import type { ModelList } from '../../../src/http/schemas/models.ts'
import type { NodeEventData } from '../../../src/http/schemas/events.ts'
import { get, post } from '../api.ts'
import type { PageProps } from '../page.ts'
import { DataTable, ErrorText, Field, Section, fieldError, useAction } from '../components.tsx'
import { formatBytes, formatDuration, formatRate } from '../format.ts'
import { useT, type MessageKey } from '../i18n.ts'
import { useLive } from '../live.ts'

type Progress = NonNullable<ModelRecord['progress']>

const STATUS_KEYS: Record<ModelRecord['status'], MessageKey> = {
  available: 'status.available',
  downloading: 'status.downloading',
  downloaded: 'status.downloaded',
  loaded: 'status.loaded',
  failed: 'status.failed'
}

/** A GGUF file registered where it lies on the node's disk, not downloaded. */
function isImported (model: ModelRecord): boolean {
  return model.source.startsWith('file:')
}

export function ModelsPage ({ snapshot, refresh }: PageProps): JSX.Element {
  const t = useT()
  const [models, setModels] = useState<ModelRecord[]>(snapshot.models)
  const [verifying, setVerifying] = useState<Set<string>>(new Set())
  const action = useAction()
  const [loadError, setLoadError] = useState<unknown>(null)

  const reload = useCallback(() => {
    get<ModelList>('/v1/app/models').then((list) => { setModels(list.models); setLoadError(null) }, setLoadError)
  }, [])
  useEffect(reload, [reload])

  // Progress comes from the event stream directly (up to 4 a second); everything else re-reads the list.
  useLive(['download.', 'model.'], (name, data) => {
    if (name === 'download.progress') {
      const { modelID, ...progress } = data as NodeEventData<'download.progress'>
      setModels((list) => list.map((m) => m.modelID === modelID ? { ...m, status: 'downloading', progress } : m))
      return
    }
    const modelID = (data as { modelID: string }).modelID
    setVerifying((set) => {
      const next = new Set(set)
      if (name === 'download.verifying') next.add(modelID)
      else next.delete(modelID)
      return next
    })
    if (name !== 'download.verifying') reload()
  }, reload)

  const act = (path: string, body?: unknown): void => {
    void action.run(async () => {
      await post(path, body)
      reload()
      refresh()
    })
  }

  // As the node's storage budget counts: models downloaded from the hub. An imported file (`source: "file:…"`) stays
  // where it was, is never evicted and does not count against max_storage_gb; it is named apart so the figures add up.
  const here = models.filter((m) => m.status === 'downloaded' || m.status === 'loaded')
  const bytesOf = (list: ModelRecord[]): number => list.reduce((sum, m) => sum + (m.sizeBytes ?? 0), 0)
  const usedBytes = bytesOf(here.filter((m) => !isImported(m)))
  const importedBytes = bytesOf(here.filter(isImported))
  const budgetBytes = snapshot.settings.max_storage_gb * 1e9

  return (
    <>
      <Section title={t('models.storage')}>
        <p id='storage-label' data-testid='storage-used'>{t('models.storageValue', { used: formatBytes(usedBytes), max: formatBytes(budgetBytes) })}</p>
        <meter aria-labelledby='storage-label' min={0} max={budgetBytes} value={Math.min(usedBytes, budgetBytes)} high={budgetBytes * 0.9} />
        {importedBytes > 0 && <p class='muted' data-testid='storage-imported'>{t('models.storageImported', { size: formatBytes(importedBytes) })}</p>}
      </Section>
      <Section title={t('models.list')}>
        <ErrorText error={action.error ?? loadError} />
        <DataTable testID='models-table' columns={[t('models.model'), t('models.params'), t('models.quant'), t('models.size'), t('models.status'), t('common.actions')]}>
          {models.map((m) => (
            <tr key={m.modelID} data-model-id={m.modelID}>
              <th scope='row'><span class='model-name'>{m.name}</span><br /><code class='muted'>{m.modelID}</code></th>
              <td>{m.parameters ?? '—'}</td>
              <td>{m.quantization ?? '—'}</td>
              <td class='nowrap'>{formatBytes(m.sizeBytes)}</td>
              <td>
                <span class={`status status-${m.status}`} data-testid='model-status'>
                  {verifying.has(m.modelID) ? t('models.verifying') : t(STATUS_KEYS[m.status])}
                </span>
                {m.status === 'downloading' && m.progress != null && <DownloadProgress name={m.name} progress={m.progress} />}
                {m.status === 'failed' && m.error != null && <p class='error small-text'>{m.error}</p>}
                {m.loaded != null && <LoadedState loaded={m.loaded} />}
              </td>
              <td class='row-actions'>
                {(m.status === 'available' || m.status === 'failed') && (
                  <button type='button' class='small' disabled={action.busy} aria-label={t('models.downloadNamed', { name: m.name })}
                    onClick={() => { act('/v1/app/models/download', { modelID: m.modelID }) }}>{t('models.download')}</button>
                )}
                {m.status === 'downloaded' && (
                  <button type='button' class='small' disabled={action.busy} aria-label={t('models.loadNamed', { name: m.name })}
                    onClick={() => { act('/v1/app/models/load', { modelID: m.modelID }) }}>{t('models.load')}</button>
                )}
                {m.status === 'loaded' && (
                  <button type='button' class='small secondary' disabled={action.busy} aria-label={t('models.unloadNamed', { name: m.name })}
                    onClick={() => { act('/v1/app/models/unload', { modelID: m.modelID }) }}>{t('models.unload')}</button>
                )}
              </td>
            </tr>
          ))}
        </DataTable>
      </Section>
      <DownloadForm onDone={() => { reload(); refresh() }} />
      <ImportForm onDone={() => { reload(); refresh() }} />
    </>
  )
}

/** What a loaded model is doing: its slots or embeddings, its memory, and whether it stays. */
function LoadedState ({ loaded }: { loaded: NonNullable<ModelRecord['loaded']> }): JSX.Element {
  const t = useT()
  const memory = formatBytes(loaded.memoryBytes)
  const work = loaded.kind === 'embedding'
    ? t('models.loadedEmbedding', { queued: String(loaded.queued), memory })
    : t('models.loadedChat', { busy: String(loaded.busySlots), slots: String(loaded.slots), queued: String(loaded.queued), memory })
  const stays = loaded.loadedBy === 'explicit' ? t('models.loadedExplicit') : t('models.loadedForRequest', { idle: `${loaded.idleSeconds} s` })
  return <p class='muted small-text' data-testid='model-loaded'>{work}<br />{stays}</p>
}

function DownloadProgress ({ name, progress }: { name: string, progress: Progress }): JSX.Element {
  const t = useT()
  const fraction = progress.fraction
  return (
    <div class='progress'>
      <progress max={1} value={fraction ?? undefined} aria-label={t('models.progressOf', { name })} data-testid='download-progress' />
      <small>
        {fraction == null ? '' : `${Math.floor(fraction * 100)}% · `}
        {formatBytes(progress.receivedBytes)}{progress.totalBytes == null ? '' : ` / ${formatBytes(progress.totalBytes)}`}
        {' · '}{formatRate(progress.bytesPerSecond)}
        {' · '}{t('models.eta', { eta: formatDuration(progress.etaSeconds) })}
      </small>
    </div>
  )
}

function DownloadForm ({ onDone }: { onDone: () => void }): JSX.Element {
  const t = useT()
  const [modelID, setModelID] = useState('')
  const action = useAction()
  return (
    <Section title={t('models.downloadOther')}>
      <form class='inline-form' onSubmit={(event) => {
        event.preventDefault()
        void action.run(async () => {
          await post('/v1/app/models/download', { modelID: modelID.trim() })
          setModelID('')
          onDone()
        })
      }}>
        <Field label={t('models.modelID')} hint={t('models.modelIDHint')} error={fieldError(action.error, 'modelID')}>
          {({ id, describedBy, invalid }) => (
            <input id={id} required value={modelID} aria-describedby={describedBy} aria-invalid={invalid} spellcheck={false}
              placeholder='hf.co/org/repo:Q4_K_M' onInput={(event) => { setModelID(event.currentTarget.value) }} />
          )}
        </Field>
        <button type='submit' disabled={action.busy}>{t('models.download')}</button>
      </form>
      {fieldError(action.error, 'modelID') == null && <ErrorText error={action.error} />}
    </Section>
  )
}

function ImportForm ({ onDone }: { onDone: () => void }): JSX.Element {
  const t = useT()
  const [path, setPath] = useState('')
  const [modelID, setModelID] = useState('')
  const [imported, setImported] = useState<string | null>(null)
  const action = useAction()
  return (
    <Section title={t('models.import')}>
      <p class='muted'>{t('models.importIntro')}</p>
      <form class='inline-form' onSubmit={(event) => {
        event.preventDefault()
        setImported(null)
        void action.run(async () => {
          const body: { path: string, modelID?: string } = { path: path.trim() }
          if (modelID.trim() !== '') body.modelID = modelID.trim()
          const result = await post<{ modelID: string }>('/v1/app/models/import', body)
          setImported(result.modelID)
          setPath('')
          setModelID('')
          onDone()
        })
      }}>
        <Field label={t('models.importPath')} error={fieldError(action.error, 'path')}>
          {({ id, describedBy, invalid }) => (
            <input id={id} required value={path} aria-describedby={describedBy} aria-invalid={invalid} spellcheck={false}
              placeholder='/home/me/models/model.gguf' onInput={(event) => { setPath(event.currentTarget.value) }} />
          )}
        </Field>
        <Field label={t('models.importID')} error={fieldError(action.error, 'modelID')}>
          {({ id, describedBy, invalid }) => (
            <input id={id} value={modelID} aria-describedby={describedBy} aria-invalid={invalid} spellcheck={false}
              onInput={(event) => { setModelID(event.currentTarget.value) }} />
          )}
        </Field>
        <button type='submit' disabled={action.busy}>{t('models.importSubmit')}</button>
      </form>
      {imported != null && <p role='status'>{t('models.imported', { id: imported })}</p>}
      {fieldError(action.error, 'path') == null && fieldError(action.error, 'modelID') == null && <ErrorText error={action.error} />}
    </Section>
  )
}
