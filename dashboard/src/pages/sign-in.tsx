// Sign-in with an API key: the key goes to the node once, in a POST body, and the node answers with an HttpOnly
// cookie. The field is cleared at once; nothing is stored in the page.
import type { JSX } from 'preact'
import { useState } from 'preact/hooks'
import { post } from '../api.ts'
import { ErrorText, Field, RichText, useAction } from '../components.tsx'
import { useT } from '../i18n.ts'

export function SignInPage ({ onSignedIn }: { onSignedIn: () => void }): JSX.Element {
  const t = useT()
  const [key, setKey] = useState('')
  const action = useAction()
  const linkExpired = location.hash.includes('link=expired')

  const submit = (event: Event): void => {
    event.preventDefault()
    const apiKey = key.trim()
    setKey('')
    void action.run(async () => {
      await post('/v1/app/session', { apiKey })
      history.replaceState(null, '', '/#/overview')
      onSignedIn()
    })
  }

  return (
    <main id='main' class='center'>
      <form class='card sign-in' onSubmit={submit}>
        <h1>{t('signIn.title')}</h1>
        <p><RichText text={t('signIn.intro')} /></p>
        {linkExpired && <p class='error' role='alert'><RichText text={t('signIn.linkExpired')} /></p>}
        <Field label={t('signIn.apiKey')} hint={t('signIn.hint')}>
          {({ id, describedBy }) => (
            <input id={id} type='password' autocomplete='off' spellcheck={false} required value={key} aria-describedby={describedBy}
              onInput={(event) => { setKey(event.currentTarget.value) }} />
          )}
        </Field>
        <ErrorText error={action.error} />
        <button type='submit' disabled={action.busy}>{t('signIn.submit')}</button>
      </form>
    </main>
  )
}
