import { test } from 'node:test'
import assert from 'node:assert/strict'
import { request } from 'node:http'
import { connect } from 'node:net'
import Anthropic from '@anthropic-ai/sdk'
import OpenAI from 'openai'
import { startTestNode, type TestNode } from '../support/node.ts'

/** A raw HTTP request, so a test can send any Host header (fetch will not). */
async function raw (url: string, path: string, headers: Record<string, string>, method = 'GET'): Promise<{ status: number, headers: Record<string, string | string[] | undefined>, body: any }> { // eslint-disable-line @typescript-eslint/no-explicit-any
  const { hostname, port } = new URL(url)
  return await new Promise((resolve, reject) => {
    const req = request({ hostname, port, path, method, headers, setHost: !('host' in headers) }, (res) => {
      let text = ''
      res.on('data', (chunk: Buffer) => { text += chunk.toString() })
      res.on('end', () => { resolve({ status: res.statusCode ?? 0, headers: res.headers, body: text === '' ? null : JSON.parse(text) }) })
    })
    req.on('error', reject)
    req.end()
  })
}

test('Host must be a loopback name, an IP literal or a configured host (DNS-rebinding guard)', async (t) => {
  const { node } = await startTestNode(t, { allowedHosts: ['mynode.lan'] })
  for (const host of ['localhost', `localhost:${node.port}`, '127.0.0.1', `[::1]:${node.port}`, 'app.localhost', 'mynode.lan:11435', '10.0.0.7']) {
    const res = await raw(node.url, '/v1/app', { host })
    assert.equal(res.status, 200, host)
  }
  for (const host of ['evil.example', 'evil.example:11435', 'localhost.evil.example', 'mynode.lan.evil', '']) {
    const res = await raw(node.url, '/v1/app', { host })
    assert.equal(res.status, 403, `host "${host}"`)
    assert.equal(res.body.error.type, 'permission_error')
    assert.match(res.body.error.message, /Host not allowed/)
  }
})

test('a request without Host is refused with a 400 in the envelope, not a bare status line', async (t) => {
  const { node } = await startTestNode(t)
  const { hostname, port } = new URL(node.url)
  const answer = await new Promise<string>((resolve, reject) => {
    const socket = connect(Number(port), hostname, () => { socket.end('GET /v1/app HTTP/1.1\r\nConnection: close\r\n\r\n') })
    let text = ''
    socket.on('data', (chunk: Buffer) => { text += chunk.toString() })
    socket.on('end', () => { resolve(text) })
    socket.on('error', reject)
  })
  const [head, body] = answer.split('\r\n\r\n')
  assert.match(head, /^HTTP\/1\.1 400 /)
  assert.match(head, /content-type: application\/json/i)
  const envelope = JSON.parse(body)
  assert.equal(envelope.error.type, 'invalid_request_error')
  assert.equal(envelope.error.param, 'host')
  assert.match(envelope.error.message, /Host header is required/)
})

test('a foreign Origin is refused; an allowed one gets CORS for itself only, preflight included', async (t) => {
  const { node, api } = await startTestNode(t, { allowedOrigins: ['http://localhost:3000'] })
  const foreign = await api.get('/v1/app', { origin: 'https://evil.example' })
  assert.equal(foreign.status, 403)
  assert.equal(foreign.body.error.type, 'permission_error')
  assert.match(foreign.body.error.message, /Origin not allowed: https:\/\/evil.example/)
  assert.equal(foreign.headers.get('access-control-allow-origin'), null)
  const nullOrigin = await api.get('/v1/app', { origin: 'null' })
  assert.equal(nullOrigin.status, 403)

  const allowed = await api.get('/v1/app', { origin: 'http://localhost:3000' })
  assert.equal(allowed.status, 200)
  assert.equal(allowed.headers.get('access-control-allow-origin'), 'http://localhost:3000')
  const preflight = await raw(node.url, '/v1/app/settings', { origin: 'http://localhost:3000', 'access-control-request-method': 'PATCH' }, 'OPTIONS')
  assert.equal(preflight.status, 204)
  assert.match(String(preflight.headers['access-control-allow-methods']), /PATCH/)

  // A browser form post from a foreign page changes nothing.
  const csrf = await api.patch('/v1/app/settings', { allow_network_access: true }, { origin: 'https://evil.example' })
  assert.equal(csrf.status, 403)
  assert.equal((await api.get('/v1/app')).body.settings.allow_network_access, false)
})

test('a page on an allowed origin may send the official SDKs\' headers, and read the request id and where it ran', async (t) => {
  const origin = 'http://localhost:3000'
  const { node } = await startTestNode(t, { allowedOrigins: [origin] })
  // The headers each SDK sends from a browser, as it sends them (the request itself is refused: no model is loaded)
  const sent: string[][] = []
  const recording = async (url: string | URL | Request, init?: RequestInit): Promise<Response> => {
    sent.push([...new Headers(init?.headers).keys()])
    return await fetch(url, init)
  }
  const anthropic = new Anthropic({ baseURL: node.url, apiKey: 'sk-ant', maxRetries: 0, dangerouslyAllowBrowser: true, fetch: recording })
  await assert.rejects(anthropic.messages.create({ model: 'none', max_tokens: 1, messages: [{ role: 'user', content: 'Hi' }] }), Anthropic.NotFoundError)
  const openai = new OpenAI({ baseURL: `${node.url}/v1`, apiKey: 'sk', organization: 'org-1', project: 'proj-1', maxRetries: 0, dangerouslyAllowBrowser: true, fetch: recording })
  await assert.rejects(openai.responses.create({ model: 'none', input: 'Hi' }), OpenAI.NotFoundError)

  for (const [names, path] of [[sent[0], '/v1/messages'], [sent[1], '/v1/responses']] as const) {
    assert.ok(names.includes('x-stainless-retry-count') && names.includes('x-stainless-os'), names.join(', '))
    // What a browser asks before it sends them: every header not on the CORS safelist
    const asked = names.filter((name) => !['accept', 'user-agent', 'content-length'].includes(name))
    const preflight = await raw(node.url, path, { origin, 'access-control-request-method': 'POST', 'access-control-request-headers': asked.join(',') }, 'OPTIONS')
    assert.equal(preflight.status, 204)
    const allowed = String(preflight.headers['access-control-allow-headers']).split(',').map((name) => name.trim().toLowerCase())
    for (const name of asked) assert.ok(allowed.includes(name), `${path}: ${name} is allowed`)
  }
  assert.ok(sent[0].includes('anthropic-dangerous-direct-browser-access'))
  assert.ok(sent[1].includes('openai-organization') && sent[1].includes('openai-project'))

  // A preflight that names no headers gets ours; the answer exposes the headers a page reads
  const bare = await raw(node.url, '/v1/messages', { origin, 'access-control-request-method': 'POST' }, 'OPTIONS')
  assert.match(String(bare.headers['access-control-allow-headers']), /x-api-key/)
  const answered = await raw(node.url, '/health', { origin })
  assert.equal(answered.status, 200)
  assert.deepEqual(String(answered.headers['access-control-expose-headers']).split(', ').sort(), ['request-id', 'retry-after', 'x-meshnode-ignored-tools', 'x-request-id', 'x-served-by'])
})

test('network access off: loopback only, and any Authorization header is ignored', async (t) => {
  const { node, api } = await startTestNode(t)
  const dummy = await api.get('/v1/app', { authorization: 'Bearer sk-dummy-from-an-sdk' })
  assert.equal(dummy.status, 200)
  // A client from another machine: inject gives the real app a non-loopback peer address (TEST-NET, never dialled).
  for (const url of ['/v1/app', '/health']) {
    const res = await node.http.inject({ method: 'GET', url, remoteAddress: '192.0.2.10', headers: { host: '192.0.2.1' } })
    assert.equal(res.statusCode, 403, url)
    assert.equal(res.json().error.type, 'permission_error')
  }
  const v6 = await node.http.inject({ method: 'GET', url: '/v1/app', remoteAddress: '::ffff:127.0.0.1', headers: { host: 'localhost' } })
  assert.equal(v6.statusCode, 200)
})

async function withNetworkAccess (t: Parameters<typeof startTestNode>[0]): Promise<TestNode & { key: string, keyID: string }> {
  const started = await startTestNode(t)
  const { body } = await started.api.post('/v1/app/apikeys', { name: 'client' })
  const on = await started.api.patch('/v1/app/settings', { allow_network_access: true })
  assert.equal(on.status, 200)
  return { ...started, key: body.key, keyID: body.id }
}

test('network access on: every route but /health needs a valid key, loopback included', async (t) => {
  const { api, key, node } = await withNetworkAccess(t)
  const health = await api.get('/health')
  assert.equal(health.status, 200)

  const missing = await api.get('/v1/app')
  assert.equal(missing.status, 401)
  assert.deepEqual(missing.body.error, { message: missing.body.error.message, type: 'authentication_error', param: null, code: 'missing_api_key' })
  for (const authorization of ['Bearer mn_wrong', 'Basic abc', `Bearer ${key}x`, 'Bearer']) {
    const res = await api.get('/v1/app', { authorization })
    assert.equal(res.status, 401, authorization)
    assert.equal(res.body.error.code, authorization === 'Basic abc' || authorization === 'Bearer' ? 'missing_api_key' : 'invalid_api_key')
  }
  const ok = await api.get('/v1/app', { authorization: `Bearer ${key}` })
  assert.equal(ok.status, 200)
  // Now other machines may connect too, with a key.
  const remote = await node.http.inject({ method: 'GET', url: '/v1/app', remoteAddress: '192.0.2.10', headers: { host: '192.0.2.1', authorization: `Bearer ${key}` } })
  assert.equal(remote.statusCode, 200)
  const remoteNoKey = await node.http.inject({ method: 'GET', url: '/v1/app', remoteAddress: '192.0.2.10', headers: { host: '192.0.2.1' } })
  assert.equal(remoteNoKey.statusCode, 401)
})

test('a revoked key stops working at once; lastUsed is recorded', async (t) => {
  const { api, key, keyID } = await withNetworkAccess(t)
  const authed = api.withHeaders({ authorization: `Bearer ${key}` })
  assert.equal((await authed.get('/v1/app')).status, 200)
  const listed = await authed.get('/v1/app/apikeys')
  const row = listed.body.keys.find((k: { id: string }) => k.id === keyID)
  assert.ok(row.lastUsed != null && !Number.isNaN(Date.parse(row.lastUsed)))
  const revoke = await authed.post('/v1/app/apikeys/revoke', { id: keyID })
  assert.equal(revoke.status, 200)
  const after = await authed.get('/v1/app')
  assert.equal(after.status, 401)
  assert.equal(after.body.error.code, 'invalid_api_key')
})

test('switching network access takes effect without restart; the admin-token always works', async (t) => {
  const { api, key, node } = await withNetworkAccess(t)
  const admin = api.withHeaders({ authorization: `Bearer ${node.adminToken}` })
  assert.equal((await admin.get('/v1/app')).status, 200)
  assert.equal((await admin.get('/v1/app/apikeys')).body.keys.length, 1, 'the admin token is never listed')
  const off = await api.patch('/v1/app/settings', { allow_network_access: false }, { authorization: `Bearer ${key}` })
  assert.equal(off.status, 200)
  assert.equal((await api.get('/v1/app')).status, 200, 'no key needed once off')
})
