// Prefix states as a user runs the node: `meshnode serve` on its defaults (only a data dir and a port given), a model
// imported and loaded through the API, an agent's long prompt asked, then the process stopped with SIGTERM and started
// again on the same data dir. The stop keeps the prefix on disk, made by the generation context the defaults choose
// (on the CPU, flash attention off: src/inference/flash-attention.ts), and the next request after the restart
// evaluates only what is new.
import assert from 'node:assert/strict'
import { readFile } from 'node:fs/promises'
import { join } from 'node:path'
import { test, type TestContext } from 'node:test'
import { PREFIX_STATE_MIN_TOKENS } from '../../src/inference/index.ts'
import { Api, exitOf, spawnNodeProcess, tempDir, type NodeProcess } from '../support/node.ts'
import { writeTinyGguf } from '../support/tiny-gguf.ts'

const MODEL = 'tiny-chat'

async function serve (t: TestContext, dataDir: string): Promise<{ node: NodeProcess, api: Api }> {
  const node = await spawnNodeProcess(t, ['--data-dir', dataDir])
  return { node, api: new Api(node.url) }
}

async function ask (api: Api, system: string, question: string): Promise<{ prompt: number, cached: number }> {
  const res = await api.post('/v1/chat/completions', { model: MODEL, messages: [{ role: 'system', content: system }, { role: 'user', content: question }], max_tokens: 4, temperature: 0 })
  assert.equal(res.status, 200, JSON.stringify(res.body))
  return { prompt: res.body.usage.prompt_tokens, cached: res.body.usage.prompt_tokens_details?.cached_tokens ?? 0 }
}

test('`meshnode serve` on defaults keeps a long prefix across SIGTERM and a restart, in the CPU generation context\'s layout', { timeout: 300_000 }, async (t) => {
  const dataDir = await tempDir(t)
  const { path } = await writeTinyGguf(join(await tempDir(t, 'meshnode-model-'), 'tiny.gguf'), { seed: 7, contextLength: 4096 })
  // One token a word in the tiny vocabulary: an agent's instructions, over the minimum a prefix must hold to be kept
  const system = Array.from({ length: PREFIX_STATE_MIN_TOKENS + 100 }, (_, i) => ['question', 'network', 'answer', 'people'][i % 4]).join(' ')

  const first = await serve(t, dataDir)
  const imported = await first.api.post('/v1/app/models/import', { path, modelID: MODEL })
  assert.equal(imported.status, 200, JSON.stringify(imported.body))
  const backend = (await first.api.get('/v1/app')).body.hardware.gpu.backend as string | null
  const cold = await ask(first.api, system, 'hello')
  assert.ok(cold.prompt > PREFIX_STATE_MIN_TOKENS && cold.cached === 0, JSON.stringify(cold))
  first.node.child.kill('SIGTERM')
  assert.equal((await exitOf(first.node.child)).code, 0, first.node.output())

  // The state the stop saved, recorded with the context it came from
  const index = JSON.parse(await readFile(join(dataDir, 'prefix-states', 'index.json'), 'utf8')) as { states: Array<{ flashAttention: boolean | 'auto', tokens: number[] }> }
  assert.equal(index.states.length, 1, `${index.states.length} states saved`)
  const [saved] = index.states
  assert.ok(saved.tokens.length > PREFIX_STATE_MIN_TOKENS)
  // `--flash-attention auto`, the default: off for generation on the CPU, llama.cpp's own choice on a GPU
  assert.equal(saved.flashAttention, backend === 'cpu' ? false : 'auto', `backend ${backend}`)

  const second = await serve(t, dataDir)
  const warm = await ask(second.api, system, 'and now?')
  assert.ok(warm.cached > PREFIX_STATE_MIN_TOKENS && warm.cached < warm.prompt, JSON.stringify(warm))
  second.node.child.kill('SIGTERM')
  assert.equal((await exitOf(second.node.child)).code, 0, second.node.output())
})
