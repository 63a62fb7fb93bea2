import { test } from 'node:test'
import assert from 'node:assert/strict'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { getSharedLlama } from '../../src/inference/llama.ts'
import { DEFAULT_TOP_K, planSampling } from '../../src/inference/sampling.ts'
import { writeTinyGguf } from '../support/tiny-gguf.ts'

test('top_k left out is 40, as in llama-server and Ollama; 0 is every token; a positive top_k is passed on', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'meshnode-sampling-'))
  t.after(async () => { await rm(dir, { recursive: true, force: true }) })
  const { path } = await writeTinyGguf(join(dir, 'tiny.gguf'), { seed: 1 })
  const llama = await getSharedLlama(1)
  const model = await llama.loadModel({ modelPath: path })
  t.after(async () => { await model.dispose() })
  // node-llama-cpp's LlamaChat drops a null top-k and applies its own 40 to what is left out, so "left out" must mean
  // the same 40 on every path; 0 reaches it as "every token" (the token loop then skips the stage altogether).
  for (const topK of [undefined, null]) {
    const { sampling } = await planSampling({ temperature: 1, topK }, model, 100)
    assert.equal(sampling.topK, DEFAULT_TOP_K, `topK ${topK}`)
  }
  assert.equal(DEFAULT_TOP_K, 40)
  assert.equal((await planSampling({ temperature: 1, topK: 0 }, model, 100)).sampling.topK, 0)
  const { sampling } = await planSampling({ temperature: 1, topK: 5 }, model, 100)
  assert.equal(sampling.topK, 5)
  await assert.rejects(planSampling({ topK: -1 }, model, 100), /topK must be an integer >= 0/)
})
