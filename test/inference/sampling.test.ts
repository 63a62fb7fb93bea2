import { test } from 'node:test'
import assert from 'node:assert/strict'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { getSharedLlama } from '../../src/inference/llama.ts'
import { planSampling } from '../../src/inference/sampling.ts'
import { writeTinyGguf } from '../support/tiny-gguf.ts'

test('top_k left out or 0 samples from every token with no top-k stage; a positive top_k is passed on', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'meshnode-sampling-'))
  t.after(async () => { await rm(dir, { recursive: true, force: true }) })
  const { path } = await writeTinyGguf(join(dir, 'tiny.gguf'), { seed: 1 })
  const llama = await getSharedLlama(1)
  const model = await llama.loadModel({ modelPath: path })
  t.after(async () => { await model.dispose() })
  // node-llama-cpp reads undefined as its own top-k of 40, and 0 as a top-k stage over the whole vocabulary (which
  // sorts every candidate before each sample); null is dropped from the sampler's configuration: no stage at all.
  for (const topK of [undefined, null, 0]) {
    const { sampling } = await planSampling({ temperature: 1, topK }, model, 100)
    assert.equal(sampling.topK, null, `topK ${topK}: no top-k stage`)
  }
  const { sampling } = await planSampling({ temperature: 1, topK: 5 }, model, 100)
  assert.equal(sampling.topK, 5)
  await assert.rejects(planSampling({ topK: -1 }, model, 100), /topK must be an integer >= 0/)
})
