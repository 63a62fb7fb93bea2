// The session store on its own, with a clock the test moves: idle and absolute expiry, one-time links, bounds.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { MAX_SESSIONS, SESSION_IDLE_MS, SESSION_MAX_AGE_MS, SIGN_IN_LINK_TTL_MS, Sessions } from '../../src/keys/sessions.ts'
import type { Principal } from '../../src/keys/index.ts'

function store (active = (_: Principal): boolean => true): { sessions: Sessions, clock: { now: number } } {
  const clock = { now: Date.parse('2026-11-22T10:00:00.000Z') }
  return { sessions: new Sessions({ keys: { isActive: active } }, { now: () => clock.now }), clock }
}

const KEY: Principal = { kind: 'api-key', keyID: 'k1', scope: 'admin' }

test('a session idles out, is kept alive by use, and ends at its maximum age whatever the use', () => {
  const { sessions, clock } = store()
  const { token, expiresAt } = sessions.start(KEY)
  assert.equal(expiresAt, new Date(clock.now + SESSION_IDLE_MS).toISOString())
  assert.deepEqual(sessions.authenticate(token), KEY)
  const started = clock.now
  while (clock.now + SESSION_IDLE_MS / 2 < started + SESSION_MAX_AGE_MS) {
    clock.now += SESSION_IDLE_MS / 2
    assert.deepEqual(sessions.authenticate(token), KEY, 'used within the idle time')
  }
  clock.now = started + SESSION_MAX_AGE_MS
  assert.equal(sessions.authenticate(token), null, 'the maximum age is final')

  const idle = sessions.start(KEY)
  clock.now += SESSION_IDLE_MS
  assert.equal(sessions.authenticate(idle.token), null)
  assert.equal(sessions.authenticate('not-a-token'), null)
})

test('a sign-in link works once, within its time, and only while its principal may act', () => {
  let active = true
  const { sessions, clock } = store(() => active)
  const link = sessions.createSignInLink({ kind: 'admin-token' })
  const session = sessions.redeemSignInLink(link.token)
  assert.ok(session != null)
  assert.notEqual(session.token, link.token)
  assert.deepEqual(sessions.authenticate(session.token), { kind: 'admin-token' })
  assert.equal(sessions.redeemSignInLink(link.token), null, 'one use')
  assert.equal(sessions.authenticate(link.token), null, 'a link is not a session')

  const late = sessions.createSignInLink(KEY)
  clock.now += SIGN_IN_LINK_TTL_MS
  assert.equal(sessions.redeemSignInLink(late.token), null)

  const revoked = sessions.createSignInLink(KEY)
  const live = sessions.start(KEY)
  active = false
  assert.equal(sessions.redeemSignInLink(revoked.token), null)
  assert.equal(sessions.authenticate(live.token), null, 'a revoked key ends its sessions')
})

test('at most MAX_SESSIONS are held: the oldest goes first', () => {
  const { sessions } = store()
  const first = sessions.start(KEY)
  const second = sessions.start(KEY)
  for (let i = 2; i < MAX_SESSIONS; i++) sessions.start(KEY)
  assert.ok(sessions.authenticate(first.token) != null)
  sessions.start(KEY)
  assert.equal(sessions.authenticate(first.token), null)
  assert.ok(sessions.authenticate(second.token) != null)
})
