import { test } from 'node:test'
import assert from 'node:assert/strict'
import { Writable } from 'node:stream'
import { createLogger } from '../src/log.ts'
import { autoLogFormat, formatLogLine } from '../src/log-format.ts'

function capture (): { sink: Writable, lines: string[] } {
  const lines: string[] = []
  const sink = new Writable({ write (chunk, _encoding, done) { lines.push(...String(chunk).split('\n').filter((l) => l !== '')); done() } })
  return { sink, lines }
}

test('the pretty format is one human line per record: time, level, part, message, fields, the request id', () => {
  const { sink, lines } = capture()
  const log = createLogger('debug', sink, 'pretty')
  log.child({ part: 'models' }).info({ modelID: 'hf.co/org/repo/file.gguf', sizeBytes: 621408, note: 'two words' }, 'download started')
  log.child({ reqId: '3f2a9c1e-aaaa-bbbb-cccc-dddddddddddd' }).warn({ path: '/v1/chat/completions' }, 'client disconnected')
  log.info({ key: 'mn_secret-key-material', token: 'admin-secret' }, 'redacted as in JSON')
  assert.match(lines[0], /^\d\d:\d\d:\d\d\.\d{3} INFO {2}\[models\] download started modelID=hf\.co\/org\/repo\/file\.gguf sizeBytes=621408 note="two words"$/)
  assert.match(lines[1], /^\d\d:\d\d:\d\d\.\d{3} WARN {2}client disconnected path=\/v1\/chat\/completions req=3f2a9c1e$/)
  assert.ok(!lines[2].includes('secret') && lines[2].includes('key=[redacted]'), lines[2])
  assert.ok(lines.every((line) => !line.startsWith('{')), 'no JSON')
})

test('an error shows its message on its line, and its stack below from level error up; colours only when asked', () => {
  const err = new Error('disk on fire')
  const warn = formatLogLine(JSON.stringify({ level: 40, time: 0, msg: 'retrying', err: { message: err.message, stack: err.stack } }), { colors: false })
  assert.match(warn, /^\d\d:\d\d:\d\d\.000 WARN {2}retrying error="disk on fire"$/)
  const error = formatLogLine(JSON.stringify({ level: 50, time: 0, msg: 'failed', err: { message: err.message, stack: err.stack } }), { colors: true })
  const [first, ...stack] = error.split('\n')
  assert.ok(first.endsWith(" \u001b[31mERROR\u001b[0m failed error=\"disk on fire\""), first)
  assert.ok(stack.length > 0 && stack.every((line) => line.startsWith('    at ')), error)
  assert.equal(formatLogLine('not json at all', { colors: false }), 'not json at all')
})

test('--log-format auto is pretty for a terminal and JSON for anything else', () => {
  assert.equal(autoLogFormat(true), 'pretty')
  assert.equal(autoLogFormat(false), 'json')
})
