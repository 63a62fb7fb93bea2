// `meshnode config set`: every settable key listed in --help with what it takes, one rule for booleans, and a wrong
// key or value refused as a wrong command line (exit 2) in one sentence naming the key, with nothing changed.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { DEFAULT_SETTINGS } from '../../src/settings/index.ts'
import { runCli as meshnode } from '../support/cli.ts'
import { startTestNode } from '../support/node.ts'

test('config set --help lists every setting with its accepted values', async () => {
  const help = await meshnode(['config', 'set', '--help'])
  assert.equal(help.code, 0, help.stderr)
  for (const key of Object.keys(DEFAULT_SETTINGS)) assert.match(help.stdout, new RegExp(`^  ${key} +\\S`, 'm'), key)
  assert.match(help.stdout, /^ {2}keep_awake +true or false \(also yes\/no, on\/off, 1\/0\)$/m)
  assert.match(help.stdout, /^ {2}org_capacity_reservation +a number from 0 to 1$/m)
  assert.match(help.stdout, /^ {2}max_storage_gb +a number above 0, at most 1000000$/m)
  assert.match(help.stdout, /^ {2}inference_backend +one of llama\.cpp, peers$/m)
  assert.match(help.stdout, /^ {2}language +one of en, zh, /m)
})

test('config set takes true/false, yes/no, on/off and 1/0 in any case for every boolean, and refuses any other word naming the key', async (t) => {
  const { node, dataDir, api } = await startTestNode(t)
  const common = ['--url', node.url, '--data-dir', dataDir]
  for (const [key, word, value] of [
    ['cluster_enabled', 'YES', true], ['cluster_enabled', 'no', false], ['keep_awake', 'On', true], ['keep_awake', 'off', false],
    ['auto_manage_models', '1', true], ['auto_manage_models', '0', false], ['keep_awake', 'True', true], ['cluster_enabled', 'FALSE', false]
  ] as const) {
    const set = await meshnode(['config', 'set', key, word, ...common])
    assert.equal(set.code, 0, `${key} ${word}: ${set.stderr}`)
    assert.equal((await api.get('/v1/app')).body.settings[key], value, `${key} ${word}`)
  }

  const before = (await api.get('/v1/app')).body.settings
  for (const [args, message] of [
    [['keep_awake', 'maybe'], 'keep_awake must be true or false (also yes/no, on/off, 1/0), not "maybe"'],
    [['cluster_enabled', 'y'], 'cluster_enabled must be true or false (also yes/no, on/off, 1/0), not "y"'],
    [['max_storage_gb', 'lots'], 'max_storage_gb must be a number above 0, at most 1000000, not "lots"'],
    [['electricity_margin', '0.5'], 'electricity_margin must be a number from 1 to 1000, not "0.5"'],
    [['language', 'klingon'], 'language must be one of en, zh, es, pt-BR, fr, de, ja, ko, ru, it, not "klingon"'],
    [['electricity_currency', 'EURO'], 'electricity_currency must be a 3-letter ISO 4217 currency code such as USD, not "EURO"'],
    [['keep_awak', 'true'], 'Unknown setting keep_awak: the settings are cluster_enabled, wan_enabled, ']
  ] as const) {
    const refused = await meshnode(['config', 'set', ...args, ...common])
    assert.equal(refused.code, 2, `${args.join(' ')}: ${refused.stderr}`)
    assert.ok(refused.stderr.startsWith(`meshnode: ${message}`), refused.stderr)
    assert.doesNotMatch(refused.stderr, /HTTP 400/)
    assert.equal(refused.stdout, '')
  }
  assert.deepEqual((await api.get('/v1/app')).body.settings, before, 'nothing changed')

  const unknownGet = await meshnode(['config', 'get', 'keep_awak', ...common])
  assert.equal(unknownGet.code, 2)
  assert.match(unknownGet.stderr, /^meshnode: Unknown setting keep_awak: the settings are /)
})
