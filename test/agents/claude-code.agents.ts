// Claude Code, the real client from npm, unchanged, against `meshnode serve` with its defaults and a random-weight
// GGUF of a 64k context: `claude -p` answers, with no API error. Its request is Claude Code's own (~50 KB: a dozen
// tools, a long system prompt, max_tokens 128000, adaptive thinking, context management, output_config), streamed.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { existsSync } from 'node:fs'
import { join } from 'node:path'
import { exitOf, spawnNodeProcess, tempDir } from '../support/node.ts'
import { writeTinyGguf } from '../support/tiny-gguf.ts'
import { agentBinary } from './agents.ts'

const CLAUDE = agentBinary('claudeCode')

test('claude -p "Say hello." --output-format json exits 0 with is_error false', { skip: existsSync(CLAUDE) ? false : 'Claude Code is not installed: npm run test:agents installs it' }, async (t) => {
  const dir = await tempDir(t, 'meshnode-agent-')
  // End tokens get weights: the answer ends by itself (end_turn), as a real model's does
  const model = await writeTinyGguf(join(dir, 'agent.gguf'), { seed: 7, contextLength: 65_536, unruly: true })
  const node = await spawnNodeProcess(t, ['--data-dir', join(dir, 'data'), '--model', model.path, '--context-size', '65536'])
  const home = await tempDir(t, 'meshnode-claude-home-')
  const claude = spawn(CLAUDE, ['-p', 'Say hello.', '--output-format', 'json', '--model', 'agent'], {
    cwd: home,
    stdio: ['ignore', 'pipe', 'pipe'],
    env: {
      PATH: process.env.PATH ?? '',
      HOME: home,
      ANTHROPIC_BASE_URL: node.url,
      ANTHROPIC_API_KEY: 'sk-ant-unused-while-network-access-is-off',
      ANTHROPIC_DEFAULT_HAIKU_MODEL: 'agent',
      DISABLE_TELEMETRY: '1',
      CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1'
    }
  })
  t.after(() => { if (claude.exitCode == null) claude.kill('SIGKILL') })
  let stdout = ''
  let stderr = ''
  claude.stdout.on('data', (chunk: Buffer) => { stdout += chunk.toString() })
  claude.stderr.on('data', (chunk: Buffer) => { stderr += chunk.toString() })
  const { code } = await exitOf(claude)
  assert.equal(code, 0, `${stdout}\n${stderr}`)
  const result = JSON.parse(stdout) as { is_error: boolean, type: string, usage: { input_tokens: number, output_tokens: number } }
  assert.equal(result.type, 'result')
  assert.equal(result.is_error, false, stdout)
  assert.ok(result.usage.input_tokens > 10_000, 'Claude Code\'s whole prompt was read')
  assert.ok(result.usage.output_tokens > 0)
  assert.match(node.output(), /"path":"\/v1\/messages","status":200/)
})
