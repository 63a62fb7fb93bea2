// Dashboard sessions over real HTTP: an API key or a one-time link becomes an HttpOnly, SameSite=Strict cookie that
// the guards accept instead of a Bearer key, with the same-origin rule that keeps other pages from using it.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import type { RunningNode } from '../../src/node.ts'
import { startTestNode, type Api } from '../support/node.ts'

interface Signed { node: RunningNode, api: Api, key: string, keyID: string, origin: string }

/** A node with network access on and one API key, as a remote dashboard user meets it. */
async function networkOn (t: Parameters<typeof startTestNode>[0]): Promise<Signed> {
  const node = await startTestNode(t)
  const { body } = await node.api.post('/v1/app/apikeys', { name: 'browser' })
  assert.equal((await node.api.patch('/v1/app/settings', { allow_network_access: true })).status, 200)
  return { node: node.node, api: node.api, key: body.key, keyID: body.id, origin: node.node.url }
}

/** The `name=value` of the session cookie a response set, and its attributes. */
function sessionCookie (headers: Headers): { pair: string, attributes: string } {
  const header = headers.get('set-cookie')
  assert.ok(header != null, 'a cookie is set')
  const [pair, ...attributes] = header.split(';').map((part) => part.trim())
  return { pair, attributes: attributes.join('; ') }
}

async function signIn (api: Api, key: string, origin: string): Promise<string> {
  const res = await api.post('/v1/app/session', { apiKey: key }, { origin })
  assert.equal(res.status, 200, JSON.stringify(res.body))
  return sessionCookie(res.headers).pair
}

test('network access off on loopback: no sign-in, and the page\'s own same-origin requests pass without CORS', async (t) => {
  const { api, node } = await startTestNode(t)
  assert.deepEqual((await api.get('/v1/app/session')).body, { signInRequired: false, signedIn: false })
  const origin = node.url
  const res = await api.patch('/v1/app/settings', { language: 'zh' }, { origin, 'sec-fetch-site': 'same-origin' })
  assert.equal(res.status, 200)
  assert.equal(res.body.language, 'zh')
  assert.equal(res.headers.get('access-control-allow-origin'), null, 'same origin needs no CORS header')
  // Another port of the same host is another origin: refused, as before.
  const otherPort = await api.patch('/v1/app/settings', { language: 'en' }, { origin: `http://127.0.0.1:${node.port + 1}` })
  assert.equal(otherPort.status, 403)
  assert.equal((await api.get('/v1/app')).body.settings.language, 'zh')
})

test('an API key signs a browser in: the cookie is HttpOnly, SameSite=Strict, per port, and replaces the Bearer key', async (t) => {
  const { api, key, origin, node } = await networkOn(t)
  assert.deepEqual((await api.get('/v1/app/session')).body, { signInRequired: true, signedIn: false })
  assert.equal((await api.get('/v1/app')).status, 401)

  const res = await api.post('/v1/app/session', { apiKey: key }, { origin })
  assert.equal(res.status, 200)
  assert.deepEqual(Object.keys(res.body).sort(), ['expiresAt', 'signedIn'])
  assert.ok(!JSON.stringify(res.body).includes(key), 'the key is not echoed')
  const { pair, attributes } = sessionCookie(res.headers)
  assert.match(pair, new RegExp(`^meshnode_session_${node.port}=[A-Za-z0-9_-]{43}$`))
  assert.ok(!pair.includes(key))
  assert.match(attributes, /HttpOnly/)
  assert.match(attributes, /SameSite=Strict/)
  assert.match(attributes, /Path=\//)

  const browser = api.withHeaders({ cookie: pair })
  assert.equal((await browser.get('/v1/app')).status, 200)
  assert.deepEqual((await browser.get('/v1/app/session')).body, { signInRequired: true, signedIn: true })
  const changed = await browser.patch('/v1/app/settings', { language: 'zh' }, { origin, 'sec-fetch-site': 'same-origin' })
  assert.equal(changed.status, 200)
  assert.equal(changed.body.language, 'zh')

  // The same token under another port's cookie name is not this node's session.
  const value = pair.split('=')[1]
  assert.equal((await api.get('/v1/app', { cookie: `meshnode_session_${node.port + 1}=${value}` })).status, 401)
})

test('a cookie alone cannot change state from anywhere but the node\'s own page (CSRF), and nothing changes', async (t) => {
  const { api, key, origin, node } = await networkOn(t)
  const browser = api.withHeaders({ cookie: await signIn(api, key, origin) })
  const attempts: Array<[string, Record<string, string>]> = [
    ['no Origin', {}],
    ['another site', { origin: 'https://evil.example' }],
    ['another port of this host', { origin: `http://127.0.0.1:${node.port + 1}` }],
    ['an opaque origin', { origin: 'null' }],
    ['same Origin but a cross-site fetch', { origin, 'sec-fetch-site': 'cross-site' }],
    ['same Origin but a same-site fetch', { origin, 'sec-fetch-site': 'same-site' }]
  ]
  for (const [what, headers] of attempts) {
    const patched = await browser.patch('/v1/app/settings', { language: 'zh' }, headers)
    assert.equal(patched.status, 403, what)
    assert.equal(patched.body.error.type, 'permission_error', what)
    const generated = await browser.post('/v1/app/apikeys', { name: 'stolen' }, headers)
    assert.equal(generated.status, 403, what)
  }
  const admin = api.withHeaders({ authorization: `Bearer ${key}` })
  assert.equal((await admin.get('/v1/app')).body.settings.language, 'en')
  assert.equal((await admin.get('/v1/app/apikeys')).body.keys.length, 1)
  // Reading is not state-changing: a GET with the cookie and no Origin is the page's own navigation.
  assert.equal((await browser.get('/v1/app/apikeys')).status, 200)
})

test('sign-in refuses bad keys and bad bodies and sets no cookie', async (t) => {
  const { api, key, keyID, origin } = await networkOn(t)
  const cases: Array<[unknown, number, string | null]> = [
    [{ apiKey: 'mn_wrong' }, 401, 'invalid_api_key'],
    [{ apiKey: `${key}x` }, 401, 'invalid_api_key'],
    [{}, 400, null],
    [{ apiKey: 42 }, 400, null],
    [{ apiKey: '' }, 400, null],
    [{ apiKey: 'x'.repeat(257) }, 400, null]
  ]
  for (const [body, status, code] of cases) {
    const res = await api.post('/v1/app/session', body, { origin })
    assert.equal(res.status, status, JSON.stringify(body))
    if (code != null) assert.equal(res.body.error.code, code)
    assert.equal(res.headers.get('set-cookie'), null)
  }
  const admin = api.withHeaders({ authorization: `Bearer ${key}` })
  assert.equal((await admin.post('/v1/app/apikeys/revoke', { id: keyID })).status, 200)
  assert.equal((await api.post('/v1/app/session', { apiKey: key }, { origin })).status, 401, 'a revoked key signs nobody in')
})

test('revoking the key a session was started with ends the session; signing out ends it too', async (t) => {
  const { api, key, keyID, origin, node } = await networkOn(t)
  const first = api.withHeaders({ cookie: await signIn(api, key, origin) })
  const second = api.withHeaders({ cookie: await signIn(api, key, origin) })
  assert.equal((await first.get('/v1/app')).status, 200)

  const out = await first.post('/v1/app/session/sign-out', {}, { origin })
  assert.equal(out.status, 200)
  assert.deepEqual(out.body, { signedIn: false })
  assert.match(out.headers.get('set-cookie') ?? '', /Max-Age=0/)
  assert.equal((await first.get('/v1/app')).status, 401)
  assert.equal((await second.get('/v1/app')).status, 200, 'other sessions stay')

  const admin = api.withHeaders({ authorization: `Bearer ${node.adminToken}` })
  assert.equal((await admin.post('/v1/app/apikeys/revoke', { id: keyID })).status, 200)
  const after = await second.get('/v1/app')
  assert.equal(after.status, 401)
  assert.equal(after.body.error.code, 'missing_api_key')
})

test('a one-time sign-in link becomes a session once, and leaves the token out of the URL', async (t) => {
  const { api, origin, node } = await networkOn(t)
  assert.equal((await api.post('/v1/app/session/link', {})).status, 401, 'minting a link needs a key')
  const admin = api.withHeaders({ authorization: `Bearer ${node.adminToken}` })
  const minted = await admin.post('/v1/app/session/link', {})
  assert.equal(minted.status, 200)
  const link = new URL(minted.body.url)
  assert.equal(link.origin, origin)
  assert.equal(link.pathname, '/sign-in')
  assert.match(link.searchParams.get('token') ?? '', /^[A-Za-z0-9_-]{43}$/)
  assert.ok(Date.parse(minted.body.expiresAt) > Date.now())

  const opened = await fetch(link, { redirect: 'manual' })
  assert.equal(opened.status, 303)
  assert.equal(opened.headers.get('location'), '/')
  assert.equal(opened.headers.get('referrer-policy'), 'no-referrer')
  const { pair, attributes } = sessionCookie(opened.headers)
  assert.ok(!pair.includes(link.searchParams.get('token') ?? ''), 'the cookie is a new secret, not the link token')
  assert.match(attributes, /HttpOnly/)
  assert.match(attributes, /SameSite=Strict/)
  assert.equal((await api.get('/v1/app', { cookie: pair })).status, 200)

  for (const again of [link.href, `${origin}/sign-in?token=${'A'.repeat(43)}`, `${origin}/sign-in`, `${origin}/sign-in?token=${'x'.repeat(300)}`]) {
    const res = await fetch(again, { redirect: 'manual' })
    assert.ok(res.status === 303 || res.status === 400, `${again}: ${res.status}`)
    assert.equal(res.headers.get('set-cookie'), null, again)
    if (res.status === 303) assert.match(res.headers.get('location') ?? '', /link=expired/)
  }
})

test('with network access off a loopback client may mint a link; the session it gives outlives switching access on', async (t) => {
  const { api, node } = await startTestNode(t)
  const minted = await api.post('/v1/app/session/link', {})
  assert.equal(minted.status, 200)
  const opened = await fetch(minted.body.url, { redirect: 'manual' })
  const { pair } = sessionCookie(opened.headers)
  assert.equal((await api.patch('/v1/app/settings', { allow_network_access: true }, { cookie: pair, origin: node.url })).status, 200)
  assert.equal((await api.get('/v1/app')).status, 401)
  assert.equal((await api.get('/v1/app', { cookie: pair })).status, 200)
})
