// The dashboard's dictionaries: `en` and `zh` complete, with the same placeholders; other codes fall back to English.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { DICTIONARIES, translate } from '../../dashboard/src/i18n.ts'
import { en } from '../../dashboard/src/messages/en.ts'
import { zh } from '../../dashboard/src/messages/zh.ts'
import { LANGUAGES } from '../../src/settings/index.ts'

function placeholders (text: string): string[] {
  return [...text.matchAll(/\{(\w+)\}/g)].map((m) => m[1]).sort()
}

test('zh translates every English string, with the same placeholders, and none is left empty or in English', () => {
  const keys = Object.keys(en) as Array<keyof typeof en>
  assert.deepEqual(Object.keys(zh).sort(), [...keys].sort())
  for (const key of keys) {
    assert.ok(zh[key].trim() !== '', key)
    assert.deepEqual(placeholders(zh[key]), placeholders(en[key]), key)
    if (/[a-z]{4,}/i.test(en[key].replace(/\{\w+\}|`[^`]*`|meshnode|API|GGUF|GB|ISO|USD|LAN|WAN|CA|PTN|ID|Solana|RPC|libp2p|multiaddr|ws:\/\/|wss:\/\/|hf\.co\S*|kWh|Cookie/g, ''))) {
      assert.notEqual(zh[key], en[key], `${key} is still English`)
    }
  }
})

test('every language the node accepts shows a complete UI: its own strings, else English; placeholders filled', () => {
  for (const language of LANGUAGES) {
    const text = translate(language, 'common.page', { page: 2, pages: 5 })
    assert.ok(text.includes('2') && text.includes('5') && !text.includes('{'), `${language}: ${text}`)
    assert.equal(translate(language, 'nav.overview'), (DICTIONARIES[language] ?? en)['nav.overview'] ?? en['nav.overview'])
  }
  assert.equal(translate('fr', 'nav.settings'), 'Settings')
  assert.equal(translate('zh', 'nav.settings'), '设置')
  assert.equal(translate('en', 'wallet.sent', { amount: 2.5, peer: 'bob', balance: 97.5 }), 'Sent 2.5 credits to bob. New balance: 97.5.')
})
