// Codex, the real client from npm, unchanged, against `meshnode serve` with its defaults and a random-weight GGUF of a
// 64k context, through a `model_providers` entry of its own config (wire_api "responses"): `codex exec` finishes its
// turn with no API error. Its request is Codex's own (~40 KB: developer prompts, function tools, a namespace of
// sub-agent tools, web_search, store false, no max_output_tokens), streamed.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { existsSync } from 'node:fs'
import { mkdir, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { exitOf, spawnNodeProcess, tempDir, waitFor } from '../support/node.ts'
import { writeTinyGguf } from '../support/tiny-gguf.ts'
import { agentBinary, agentCommand } from './agents.ts'

/** `codex exec --json` prints one event a line: thread.started, turn.started, item.*, then turn.completed or turn.failed. */
interface CodexEvent { type: string, message?: string, item?: { type: string, message?: string }, usage?: { input_tokens: number, output_tokens: number } }

/** The key's variable, named by the provider entry: Codex sends it as a bearer token, which the node ignores while network access is off. */
const KEY_VARIABLE = 'MESHNODE_API_KEY'

function config (nodeURL: string): string {
  return [
    'model = "agent"',
    'model_provider = "meshnode"',
    // Offline: no update check, no analytics, no feedback uploads
    'check_for_update_on_startup = false',
    '',
    '[model_providers.meshnode]',
    'name = "meshnode"',
    `base_url = "${nodeURL}/v1"`,
    'wire_api = "responses"',
    `env_key = "${KEY_VARIABLE}"`,
    '',
    '[analytics]',
    'enabled = false',
    '',
    '[feedback]',
    'enabled = false',
    ''
  ].join('\n')
}

test('codex exec --json "Say hello." exits 0 with its turn completed and no error', { skip: existsSync(agentBinary('codex')) ? false : 'Codex is not installed: npm run test:agents installs it' }, async (t) => {
  const dir = await tempDir(t, 'meshnode-agent-')
  // End tokens get weights: the answer ends by itself, as a real model's does (Codex sets no max_output_tokens)
  const model = await writeTinyGguf(join(dir, 'agent.gguf'), { seed: 7, contextLength: 65_536, unruly: true })
  const node = await spawnNodeProcess(t, ['--data-dir', join(dir, 'data'), '--model', model.path, '--context-size', '65536'])
  const home = await tempDir(t, 'meshnode-codex-home-')
  const codexHome = join(home, '.codex')
  const project = join(home, 'project')
  await mkdir(codexHome)
  await mkdir(project)
  await writeFile(join(codexHome, 'config.toml'), config(node.url))
  const { command, args } = agentCommand('codex')
  // --strict-config: a key this version does not know fails the run instead of being ignored
  const codex = spawn(command, [...args, 'exec', '--json', '--strict-config', '--skip-git-repo-check', '--ephemeral', 'Say hello.'], {
    cwd: project,
    // stdin closed: `codex exec` appends piped stdin to the prompt, and would wait for it
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { PATH: process.env.PATH ?? '', HOME: home, CODEX_HOME: codexHome, [KEY_VARIABLE]: 'sk-unused-while-network-access-is-off' }
  })
  t.after(() => { if (codex.exitCode == null) codex.kill('SIGKILL') })
  let stdout = ''
  let stderr = ''
  codex.stdout.on('data', (chunk: Buffer) => { stdout += chunk.toString() })
  codex.stderr.on('data', (chunk: Buffer) => { stderr += chunk.toString() })
  const { code } = await exitOf(codex)
  assert.equal(code, 0, `${stdout}\n${stderr}`)
  const events = stdout.split('\n').filter((line) => line.startsWith('{')).map((line) => JSON.parse(line) as CodexEvent)
  // A failed request is retried ("Reconnecting... 1/5"), each try an `error` event, before the turn fails
  assert.deepEqual(events.filter((event) => event.type === 'error' || event.type === 'turn.failed'), [], stdout)
  // Codex's own notice that it has no metadata (context window, tools) for a model it does not know is an error item
  const errorItems = events.filter((event) => event.item?.type === 'error' && !/^Model metadata for `agent` not found/.test(event.item.message ?? ''))
  assert.deepEqual(errorItems, [], stdout)
  const completed = events.at(-1)
  assert.equal(completed?.type, 'turn.completed', stdout)
  assert.ok(completed.usage != null, stdout)
  assert.ok(completed.usage.input_tokens > 5_000, 'Codex\'s whole prompt was read')
  assert.ok(completed.usage.output_tokens > 0)
  await waitFor(() => /"path":"\/v1\/responses","status":200/.test(node.output()), { what: 'the node to log the answered request' })
})
