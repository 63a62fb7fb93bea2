// The README's first steps are commands people paste: they must name things that exist, and work as the README says,
// on a machine with no way to the hub too.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { readFileSync } from 'node:fs'
import { createServer } from 'node:net'
import { join } from 'node:path'
import OpenAI from 'openai'
import { findCatalogEntry } from '../src/models/index.ts'
import { buildProgram } from '../src/cli/program.ts'
import { runCli as meshnode } from './support/cli.ts'
import { record, subscribe } from './support/model-api.ts'
import { startTestNode, tempDir } from './support/node.ts'
import { writeTinyGguf } from './support/tiny-gguf.ts'

const readme = readFileSync(join(import.meta.dirname, '..', 'README.md'), 'utf8')

function sectionAfter (heading: string): string {
  const start = readme.indexOf(heading)
  assert.ok(start >= 0, `the README has ${heading}`)
  const end = readme.indexOf('\n#', start + heading.length)
  return readme.slice(start, end < 0 ? undefined : end)
}

/** The README's command as the arguments of `meshnode` (after `npx meshnode`), its quoted words as one argument. */
function cliArgs (command: string): string[] {
  const words = command.match(/"[^"]*"|\S+/g) ?? []
  assert.deepEqual(words.slice(0, 2), ['npx', 'meshnode'], command)
  return words.slice(2).map((word) => word.replace(/^"(.*)"$/, '$1'))
}

function codeBlockAfter (heading: string): string {
  const section = readme.slice(readme.indexOf(heading))
  const block = /```\w*\n([\s\S]*?)```/.exec(section)
  assert.ok(block != null, `a code block after ${heading}`)
  return block[1]
}

test('the Quick start keeps its two commands; the first answer is one command naming a catalog model the SDK example uses', () => {
  const quickStart = codeBlockAfter('## Quick start').trim().split('\n').map((line) => line.replace(/\s+#.*$/, ''))
  assert.deepEqual(quickStart, ['npm install && npm start', 'npm install && npm test'])

  const first = codeBlockAfter('### Your first answer').trim().split('\n')
  assert.equal(first.length, 1)
  const run = /^npx meshnode run (\S+) "Hello"$/.exec(first[0])
  assert.ok(run != null, first[0])
  assert.ok(findCatalogEntry(run[1]) != null, `${run[1]} is in the catalog`)
  assert.ok(buildProgram().commands.some((command) => command.name() === 'run'))

  const sdk = codeBlockAfter('### From your own code')
  assert.match(sdk, /baseURL: 'http:\/\/127\.0\.0\.1:11435\/v1'/)
  assert.ok(sdk.includes(`model: '${run[1]}'`), 'the SDK example asks the model the first answer loaded')
})

test('offline, the first command fails at once saying what to do, and the README\'s local-GGUF path answers, also from the SDK', async (t) => {
  // No route to the hub: HF_ENDPOINT is a loopback port where nothing listens, so every connection is refused
  const closed = createServer()
  await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve))
  const hubUrl = `http://127.0.0.1:${(closed.address() as { port: number }).port}`
  await new Promise((resolve) => closed.close(resolve))
  const { node, dataDir, api } = await startTestNode(t, { hfEndpoint: hubUrl })
  const events = await subscribe(t, api)
  const common = ['--url', node.url, '--data-dir', dataDir]

  const firstArgs = cliArgs(codeBlockAfter('### Your first answer').trim())
  const first = await meshnode([...firstArgs, ...common])
  assert.equal(first.code, 1, first.stderr)
  assert.equal(first.stdout, '')
  // One sentence: the cause, then the ways forward the README names
  assert.match(first.stderr, new RegExp(`^meshnode: Cannot reach the model hub at ${hubUrl.replaceAll('.', '\\.')} \\(.*ECONNREFUSED.*\\): `))
  for (const way of ['`meshnode run ./model.gguf`', 'HF_ENDPOINT', 'HTTPS_PROXY', 'NODE_USE_ENV_PROXY=1']) {
    assert.ok(first.stderr.includes(way), `names ${way}: ${first.stderr}`)
  }
  assert.equal(first.stderr.trim().split('\n').length, 1, first.stderr)
  assert.doesNotMatch(first.stderr, /Download of|resuming in/, 'no retry loop')
  // Refused before any download started: nothing was tried a second time
  assert.equal((await record(api, firstArgs[1])).status, 'available')
  assert.deepEqual(events.events.filter((e) => e.event.startsWith('download.')), [])

  // What the README offers instead: a GGUF file you have, run by its path, listed under an id made of its file name
  const section = sectionAfter('### Your first answer')
  for (const way of ['HF_ENDPOINT', 'HTTPS_PROXY', 'NODE_USE_ENV_PROXY=1']) assert.ok(section.includes(way), `the README names ${way}`)
  const local = /`(npx meshnode run \.\/\S+\.gguf)`/.exec(section)
  assert.ok(local != null, 'the README shows how to run a local GGUF')
  const naming = /`([^`]+\.gguf)` becomes `([^`]+)`/.exec(section)
  assert.ok(naming != null, 'the README says which id a file gets')
  const [, fileName, expectedID] = naming
  const cwd = await tempDir(t, 'meshnode-readme-')
  const gguf = await writeTinyGguf(join(cwd, fileName))
  const localArgs = cliArgs(`${local[1].replace(/\.\/\S+\.gguf/, `./${fileName}`)} "Hello"`)
  const answered = await meshnode([...localArgs, '--max-tokens', '4', '--temperature', '0', ...common], { cwd })
  assert.equal(answered.code, 0, answered.stderr)
  assert.ok(answered.stderr.includes(`Imported ${gguf.path} as ${expectedID}\n`), answered.stderr)
  assert.notEqual(answered.stdout.trim(), '')

  // From your own code: the id `models list` shows, the one run printed, is the SDK's `model`
  const ownCode = sectionAfter('### From your own code')
  assert.match(ownCode, /`npx meshnode models list`/)
  const listed = await meshnode(['models', 'list', '--json', ...common])
  assert.equal(listed.code, 0, listed.stderr)
  assert.ok(listed.stdout.includes(`"${expectedID}"`), listed.stdout)
  const openai = new OpenAI({ baseURL: `${node.url}/v1`, apiKey: 'unused-while-network-access-is-off', maxRetries: 0 })
  const reply = await openai.chat.completions.create({ model: expectedID, messages: [{ role: 'user', content: 'Hello' }], max_tokens: 4, temperature: 0 })
  assert.equal(`${reply.choices[0].message.content ?? ''}\n`, answered.stdout, 'the SDK gets what run printed')
})
