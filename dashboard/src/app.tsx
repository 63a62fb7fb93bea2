// The dashboard's frame: sign-in gate, navigation, the live snapshot of the node, and the page the hash names.
import type { JSX } from 'preact'
import { useCallback, useEffect, useRef, useState } from 'preact/hooks'
import type { AppSnapshot } from '../../src/http/schemas/app.ts'
import type { SessionState } from '../../src/http/schemas/session.ts'
import { get, onSignedOut, post } from './api.ts'
import { ErrorText } from './components.tsx'
import { I18nProvider, browserLanguage, translate, type MessageKey } from './i18n.ts'
import { startLive, stopLive, useLive } from './live.ts'
import { ChatPage } from './pages/chat.tsx'
import { KeysPage } from './pages/keys.tsx'
import { ModelsPage } from './pages/models.tsx'
import { OverviewPage } from './pages/overview.tsx'
import { PeersPage } from './pages/peers.tsx'
import { PtnPage } from './pages/ptn.tsx'
import { SettingsPage } from './pages/settings.tsx'
import { SignInPage } from './pages/sign-in.tsx'
import { WalletPage } from './pages/wallet.tsx'
import type { PageProps } from './page.ts'


const PAGES: Array<{ id: string, title: MessageKey, Page: (props: PageProps) => JSX.Element }> = [
  { id: 'overview', title: 'nav.overview', Page: OverviewPage },
  { id: 'models', title: 'nav.models', Page: ModelsPage },
  { id: 'chat', title: 'nav.chat', Page: ChatPage },
  { id: 'peers', title: 'nav.peers', Page: PeersPage },
  { id: 'wallet', title: 'nav.wallet', Page: WalletPage },
  { id: 'ptn', title: 'nav.ptn', Page: PtnPage },
  { id: 'keys', title: 'nav.keys', Page: KeysPage },
  { id: 'settings', title: 'nav.settings', Page: SettingsPage }
]

/**
 * The snapshot is asked for at once, beside the session check, so the overview needs one round trip less. Where a
 * sign-in is needed it is refused (401), and the page asks again once signed in.
 */
let prefetched: Promise<AppSnapshot | null> | null = get<AppSnapshot>('/v1/app').catch(() => null)

/** `#/models` → 'models'. Other hashes (the skip link's `#main`) leave the page as it is. */
function routeOf (hash: string): string | null {
  if (!hash.startsWith('#/')) return null
  const id = hash.slice(2).split('?')[0]
  return PAGES.some((page) => page.id === id) ? id : 'overview'
}

function useRoute (): string {
  const [route, setRoute] = useState(() => routeOf(location.hash) ?? 'overview')
  useEffect(() => {
    const onChange = (): void => {
      const next = routeOf(location.hash)
      if (next != null) setRoute(next)
    }
    addEventListener('hashchange', onChange)
    return () => { removeEventListener('hashchange', onChange) }
  }, [])
  return route
}

export function App (): JSX.Element {
  const [session, setSession] = useState<SessionState | null>(null)
  const [error, setError] = useState<unknown>(null)

  const checkSession = useCallback(() => {
    get<SessionState>('/v1/app/session').then(setSession, setError)
  }, [])
  useEffect(checkSession, [checkSession])
  useEffect(() => onSignedOut(checkSession), [checkSession])

  if (session == null) {
    return <I18nProvider language={browserLanguage()}><main id='main' class='center'>{error == null ? <p>…</p> : <ErrorText error={error} />}</main></I18nProvider>
  }
  if (session.signInRequired && !session.signedIn) {
    return <I18nProvider language={browserLanguage()}><SignInPage onSignedIn={checkSession} /></I18nProvider>
  }
  return <SignedIn session={session} onSignedOut={checkSession} />
}

function SignedIn ({ session, onSignedOut: signedOut }: { session: SessionState, onSignedOut: () => void }): JSX.Element {
  const route = useRoute()
  const [snapshot, setSnapshot] = useState<AppSnapshot | null>(null)
  const [error, setError] = useState<unknown>(null)
  const pending = useRef<ReturnType<typeof setTimeout> | null>(null)

  const refresh = useCallback(() => {
    get<AppSnapshot>('/v1/app').then((next) => { setSnapshot(next); setError(null) }, setError)
  }, [])
  useEffect(() => {
    startLive()
    const first = prefetched
    prefetched = null
    if (first == null) refresh()
    else first.then((ready) => { if (ready == null) refresh(); else setSnapshot(ready) }, refresh)
    // Uptime and peer latency change without events; a slow poll keeps them honest.
    const timer = setInterval(refresh, 10_000)
    return () => {
      clearInterval(timer)
      stopLive()
    }
  }, [refresh])
  // Many events can come at once (download progress): one snapshot read for a burst.
  useLive(['download.completed', 'download.failed', 'model.', 'wallet.', 'peer.', 'settings.'], () => {
    if (pending.current != null) return
    pending.current = setTimeout(() => {
      pending.current = null
      refresh()
    }, 250)
  }, refresh)

  const language = snapshot?.settings.language ?? browserLanguage()
  useEffect(() => { document.documentElement.lang = language }, [language])
  const page = PAGES.find((p) => p.id === route) ?? PAGES[0]
  useEffect(() => { document.title = `${translate(language, page.title)} · meshnode` }, [language, page])
  const mainRef = useRef<HTMLElement>(null)

  const signOut = async (): Promise<void> => {
    await post('/v1/app/session/sign-out')
    signedOut()
  }

  return (
    <I18nProvider language={language}>
      <a class='skip-link' href='#main' onClick={(event) => { event.preventDefault(); mainRef.current?.focus() }}>
        {translate(language, 'nav.skip')}
      </a>
      <header class='top'>
        <span class='brand'>meshnode</span>
        {snapshot != null && <span class='node-name' data-testid='header-node-name'>{snapshot.node.name}</span>}
        {session.signInRequired && (
          <button type='button' class='secondary small' onClick={() => { signOut().catch(setError) }}>{translate(language, 'nav.signOut')}</button>
        )}
      </header>
      <div class='layout'>
        <nav aria-label={translate(language, 'nav.label')}>
          <ul>
            {PAGES.map((p) => (
              <li key={p.id}>
                <a href={`#/${p.id}`} aria-current={p.id === page.id ? 'page' : undefined}>{translate(language, p.title)}</a>
              </li>
            ))}
          </ul>
        </nav>
        <main id='main' ref={mainRef} tabIndex={-1}>
          <h1>{translate(language, page.title)}</h1>
          <ErrorText error={error} />
          {snapshot == null ? <p>{translate(language, 'common.loading')}</p> : <page.Page snapshot={snapshot} refresh={refresh} />}
        </main>
      </div>
    </I18nProvider>
  )
}
