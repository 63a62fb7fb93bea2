import { test } from 'node:test'
import assert from 'node:assert/strict'
import { DEFAULT_SETTINGS, SECRET_MASK } from '../../src/settings/index.ts'
import { runCli } from '../support/cli.ts'
import { startTestNode } from '../support/node.ts'

const PASSCODE = 'hunter2-cluster-passcode'

test('cluster_passcode is write-only: no response ever contains it; sending the mask back keeps it', async (t) => {
  const { api, node, dataDir } = await startTestNode(t)
  const stored = (): string => JSON.parse((node.db.prepare("SELECT value FROM settings WHERE key = 'cluster_passcode'").get() as { value: string }).value)
  const texts: string[] = []
  const seen = async (res: Promise<{ status: number, body: unknown }>): Promise<{ status: number, body: any }> => { // eslint-disable-line @typescript-eslint/no-explicit-any
    const answer = await res
    texts.push(JSON.stringify(answer.body))
    return answer
  }

  assert.equal((await seen(api.get('/v1/app'))).body.settings.cluster_passcode, '', 'unset answers ""')
  const set = await seen(api.patch('/v1/app/settings', { cluster_passcode: PASSCODE }))
  assert.equal(set.status, 200)
  assert.equal(set.body.cluster_passcode, SECRET_MASK)
  assert.equal(stored(), PASSCODE, 'the passcode itself was stored')

  const snapshot = await seen(api.get('/v1/app'))
  assert.equal(snapshot.body.settings.cluster_passcode, SECRET_MASK)
  // A client that PATCHes back what it read does not replace the passcode with the mask.
  const roundTrip = await seen(api.patch('/v1/app/settings', { ...snapshot.body.settings, max_storage_gb: 9 }))
  assert.equal(roundTrip.status, 200)
  assert.equal(stored(), PASSCODE)
  assert.equal(roundTrip.body.max_storage_gb, 9)
  // Refused patches that carry it do not echo it.
  for (const body of [{ cluster_passcode: PASSCODE, bogus: 1 }, { cluster_passcode: PASSCODE, max_storage_gb: -1 }, { cluster_passcode: PASSCODE + 'x'.repeat(300) }]) {
    assert.equal((await seen(api.patch('/v1/app/settings', body))).status, 400)
  }
  assert.equal((await seen(api.patch('/v1/app/settings', { language: 'de' }))).body.cluster_passcode, SECRET_MASK)
  for (const path of ['/health', '/openapi.json', '/metrics', '/v1/models', '/v1/app/peers', '/v1/app/models']) await seen(api.get(path))

  const cli = ['--url', node.url, '--data-dir', dataDir]
  for (const args of [['config', 'get'], ['config', 'get', '--json'], ['config', 'get', 'cluster_passcode'], ['status', '--json'], ['config', 'set', 'language', 'fr']]) {
    const result = await runCli([...args, ...cli])
    assert.equal(result.code, 0, result.stderr)
    texts.push(result.stdout + result.stderr)
  }
  for (const text of texts) assert.ok(!text.includes(PASSCODE), `no passcode in ${text.slice(0, 200)}`)

  // Clearing it answers "" again.
  assert.equal((await api.patch('/v1/app/settings', { cluster_passcode: '' })).body.cluster_passcode, '')
  assert.deepEqual(Object.keys(DEFAULT_SETTINGS).sort(), Object.keys(snapshot.body.settings).sort())
})
