// API keys: the list (masked, with each key's scope), generate (the full key shown once, in this page's memory only)
// with the scope chosen, revoke.
import type { JSX } from 'preact'
import { useCallback, useEffect, useId, useState } from 'preact/hooks'
import type { ApiKeyList, ApiKeyRow, ApiKeyScope, GeneratedApiKey } from '../../../src/http/schemas/apikeys.ts'
import { get, post } from '../api.ts'
import type { PageProps } from '../page.ts'
import { ConfirmDialog, Copyable, DataTable, ErrorText, Field, Section, fieldError, useAction } from '../components.tsx'
import { formatTime } from '../format.ts'
import { useLanguage, useT, type MessageKey } from '../i18n.ts'

/**
 * The scopes as the form offers them: `inference` first, and chosen unless changed, since keys mostly go to apps,
 * which need only the OpenAI-compatible API; an admin key controls the whole node.
 */
const SCOPES: Array<{ scope: ApiKeyScope, hint: MessageKey }> = [
  { scope: 'inference', hint: 'keys.scopeInferenceHint' },
  { scope: 'admin', hint: 'keys.scopeAdminHint' }
]

const SCOPE_LABELS: Record<ApiKeyScope, MessageKey> = { inference: 'keys.scopeInference', admin: 'keys.scopeAdmin' }

export function KeysPage (_props: PageProps): JSX.Element {
  const t = useT()
  const language = useLanguage()
  const [keys, setKeys] = useState<ApiKeyRow[]>([])
  const [name, setName] = useState('')
  const [scope, setScope] = useState<ApiKeyScope>(SCOPES[0].scope)
  const [generated, setGenerated] = useState<GeneratedApiKey | null>(null)
  const [revoking, setRevoking] = useState<ApiKeyRow | null>(null)
  const [loadError, setLoadError] = useState<unknown>(null)
  const action = useAction()
  const formID = useId()
  const reload = useCallback(() => {
    get<ApiKeyList>('/v1/app/apikeys').then((list) => { setKeys(list.keys); setLoadError(null) }, setLoadError)
  }, [])
  useEffect(reload, [reload])

  return (
    <>
      <Section title={t('keys.generate')}>
        <form class='key-form' onSubmit={(event) => {
          event.preventDefault()
          void action.run(async () => {
            setGenerated(await post<GeneratedApiKey>('/v1/app/apikeys', { name: name.trim(), scope }))
            setName('')
            setScope(SCOPES[0].scope)
            reload()
          })
        }}>
          <Field label={t('keys.name')} error={fieldError(action.error, 'name')}>
            {({ id, describedBy, invalid }) => <input id={id} required maxLength={128} value={name} aria-describedby={describedBy} aria-invalid={invalid} onInput={(e) => { setName(e.currentTarget.value) }} />}
          </Field>
          <fieldset class='choices'>
            <legend>{t('keys.scope')}</legend>
            {SCOPES.map((option) => (
              <div key={option.scope} class='choice'>
                <input type='radio' id={`${formID}-${option.scope}`} name='scope' value={option.scope} checked={scope === option.scope}
                  aria-describedby={`${formID}-${option.scope}-hint`} onChange={() => { setScope(option.scope) }} />
                <label for={`${formID}-${option.scope}`}>{t(SCOPE_LABELS[option.scope])}</label>
                <small id={`${formID}-${option.scope}-hint`} class='hint'>{t(option.hint)}</small>
              </div>
            ))}
          </fieldset>
          <button type='submit' disabled={action.busy}>{t('keys.generateButton')}</button>
        </form>
        {generated != null && (
          <div class='notice' role='status' data-testid='new-key'>
            <p><strong>{t('keys.shownOnce', { name: generated.name })}</strong></p>
            <Copyable value={generated.key} label={t('keys.copyKey')} testID='new-key-value' />
            <div class='actions'>
              <button type='button' class='secondary small' onClick={() => { setGenerated(null) }}>{t('keys.done')}</button>
            </div>
          </div>
        )}
      </Section>
      <Section title={t('keys.list')}>
        <ErrorText error={loadError ?? (fieldError(action.error, 'name') == null ? action.error : null)} />
        {keys.length === 0
          ? <p>{t('keys.none')}</p>
          : (
            <DataTable testID='keys-table' columns={[t('keys.name'), t('keys.key'), t('keys.scope'), t('keys.created'), t('keys.lastUsed'), t('keys.status'), t('common.actions')]}>
              {keys.map((key) => (
                <tr key={key.id} data-key-id={key.id}>
                  <th scope='row'>{key.name}</th>
                  <td><code data-testid='key-prefix'>{key.prefix}</code></td>
                  <td data-testid='key-scope'>{t(SCOPE_LABELS[key.scope])}</td>
                  <td>{formatTime(key.created, language)}</td>
                  <td>{key.lastUsed == null ? t('keys.never') : formatTime(key.lastUsed, language)}</td>
                  <td>{key.status === 'active' ? t('keys.active') : t('keys.revoked')}</td>
                  <td>
                    {key.status === 'active' && (
                      <button type='button' class='small danger' aria-label={t('keys.revokeNamed', { name: key.name })}
                        onClick={() => { setRevoking(key) }}>{t('keys.revoke')}</button>
                    )}
                  </td>
                </tr>
              ))}
            </DataTable>
            )}
      </Section>
      {revoking != null && (
        <ConfirmDialog title={t('keys.revokeTitle', { name: revoking.name })} danger confirmLabel={t('keys.revoke')}
          onCancel={() => { setRevoking(null) }}
          onConfirm={() => {
            const id = revoking.id
            setRevoking(null)
            void action.run(async () => { await post('/v1/app/apikeys/revoke', { id }); reload() })
          }}>
          <p>{t('keys.revokeBody')}</p>
        </ConfirmDialog>
      )}
    </>
  )
}
