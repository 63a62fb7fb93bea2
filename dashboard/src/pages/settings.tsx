// Settings: every key of the settings object, typed as the node's own OpenAPI document says (so a setting added to
// the node appears here without a change), saved as one PATCH of what changed. The node validates: its 400 names the
// key (`param`), and the message is shown at that field. Secrets are write-only: never shown, sent only when typed.
import type { JSX } from 'preact'
import { useEffect, useState } from 'preact/hooks'
import type { SettingsObject } from '../../../src/http/schemas/settings.ts'
import { ApiError, get, patch } from '../api.ts'
import type { PageProps } from '../page.ts'
import { ErrorText, Field, Section, useAction } from '../components.tsx'
import { useT, type MessageKey, type Translate } from '../i18n.ts'

type Key = keyof SettingsObject
interface SettingSchema { type: 'boolean' | 'number' | 'string', enum?: string[] }
type Draft = Record<string, string | boolean>

/** Settings whose value the node never answers (hardening: it says only whether one is set). */
const WRITE_ONLY = new Set<string>(['cluster_passcode'])

/** The settings object's schema from GET /openapi.json: the response of PATCH /v1/app/settings. */
async function loadSchema (): Promise<Record<string, SettingSchema>> {
  const doc = await get<{ paths: Record<string, Record<string, { responses: Record<string, { content: Record<string, { schema: { properties: Record<string, SettingSchema> } }> }> }>> }>('/openapi.json')
  return doc.paths['/v1/app/settings'].patch.responses['200'].content['application/json'].schema.properties
}

function label (t: Translate, key: string): string {
  const text = t(`setting.${key}` as MessageKey)
  return text === `setting.${key}` ? key : text
}

function hint (t: Translate, key: string): string | undefined {
  const text = t(`settingHint.${key}` as MessageKey)
  return text === `settingHint.${key}` ? undefined : text
}

function draftOf (settings: SettingsObject): Draft {
  const draft: Draft = {}
  for (const [key, value] of Object.entries(settings)) draft[key] = WRITE_ONLY.has(key) ? '' : (typeof value === 'boolean' ? value : String(value))
  return draft
}

/** Language codes by their own name, so a reader of any of them finds theirs. */
function languageName (code: string): string {
  try {
    return new Intl.DisplayNames([code], { type: 'language' }).of(code) ?? code
  } catch (err) {
    if (err instanceof RangeError) return code // a code the browser does not know
    throw err
  }
}

export function SettingsPage ({ snapshot, refresh }: PageProps): JSX.Element {
  const t = useT()
  const settings = snapshot.settings
  const [schema, setSchema] = useState<Record<string, SettingSchema> | null>(null)
  const [draft, setDraft] = useState<Draft>(() => draftOf(settings))
  const [saved, setSaved] = useState(false)
  const [loadError, setLoadError] = useState<unknown>(null)
  const action = useAction()
  useEffect(() => { loadSchema().then(setSchema, setLoadError) }, [])

  const changes = (): Record<string, unknown> => {
    const patchBody: Record<string, unknown> = {}
    for (const key of Object.keys(settings) as Key[]) {
      const value = draft[key]
      const kind = schema?.[key]?.type ?? typeof settings[key]
      if (WRITE_ONLY.has(key)) {
        if (value !== '') patchBody[key] = value
        continue
      }
      // A number field sends what was typed, so the node's range message (not the browser's) answers a bad value
      const typed = kind === 'number' ? (value === '' ? value : Number(value)) : value
      if (typed !== settings[key]) patchBody[key] = typed
    }
    return patchBody
  }

  const save = (body: Record<string, unknown>): void => {
    setSaved(false)
    void action.run(async () => {
      const next = await patch<SettingsObject>('/v1/app/settings', body)
      setDraft(draftOf(next))
      setSaved(true)
      refresh()
    })
  }

  const badKey = action.error instanceof ApiError ? action.error.param : null
  const set = (key: string, value: string | boolean): void => {
    setSaved(false)
    setDraft((d) => ({ ...d, [key]: value }))
  }

  return (
    <Section title={t('settings.title')}>
      <ErrorText error={loadError} />
      <form class='settings' data-testid='settings-form' onSubmit={(event) => { event.preventDefault(); save(changes()) }}>
        {(Object.keys(settings) as Key[]).map((key) => {
          const kind = schema?.[key]?.type ?? typeof settings[key]
          const options = schema?.[key]?.enum
          const error = badKey === key ? (action.error as ApiError).message : null
          const value = draft[key]
          if (kind === 'boolean') {
            return (
              <Field key={key} label={label(t, key)} hint={hint(t, key)} error={error}>
                {({ id, describedBy, invalid }) => (
                  <input id={id} type='checkbox' name={key} checked={value === true} aria-describedby={describedBy} aria-invalid={invalid}
                    onChange={(e) => { set(key, e.currentTarget.checked) }} />
                )}
              </Field>
            )
          }
          if (options != null) {
            return (
              <Field key={key} label={label(t, key)} hint={hint(t, key)} error={error}>
                {({ id, describedBy, invalid }) => (
                  <select id={id} name={key} value={String(value)} aria-describedby={describedBy} aria-invalid={invalid}
                    onChange={(e) => { set(key, e.currentTarget.value) }}>
                    {options.map((option) => <option key={option} value={option}>{key === 'language' ? `${languageName(option)} (${option})` : option}</option>)}
                  </select>
                )}
              </Field>
            )
          }
          if (WRITE_ONLY.has(key)) {
            const isSet = settings[key] !== ''
            return (
              <Field key={key} label={label(t, key)} hint={isSet ? t('settings.secretSet') : t('settings.secretUnset')} error={error}>
                {({ id, describedBy, invalid }) => (
                  <span class='inline'>
                    <input id={id} type='password' name={key} autocomplete='new-password' value={String(value)} aria-describedby={describedBy}
                      aria-invalid={invalid} placeholder={isSet ? '••••••••' : ''} onInput={(e) => { set(key, e.currentTarget.value) }} />
                    {isSet && <button type='button' class='secondary small' onClick={() => { save({ [key]: '' }) }}>{t('settings.clearSecret')}</button>}
                  </span>
                )}
              </Field>
            )
          }
          return (
            <Field key={key} label={label(t, key)} hint={hint(t, key)} error={error}>
              {({ id, describedBy, invalid }) => kind === 'number'
                ? <input id={id} name={key} type='number' step='any' value={String(value)} aria-describedby={describedBy} aria-invalid={invalid}
                    onInput={(e) => { set(key, e.currentTarget.value) }} />
                : <input id={id} name={key} type='text' value={String(value)} aria-describedby={describedBy} aria-invalid={invalid} spellcheck={false}
                    onInput={(e) => { set(key, e.currentTarget.value) }} />}
            </Field>
          )
        })}
        {badKey == null && <ErrorText error={action.error} />}
        {saved && <p role='status'>{t('settings.saved')}</p>}
        <div class='actions'>
          <button type='submit' disabled={action.busy}>{t('settings.save')}</button>
        </div>
      </form>
    </Section>
  )
}
