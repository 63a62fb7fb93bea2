import { test } from 'node:test'
import { runCli as meshnode } from '../support/cli.ts'
import assert from 'node:assert/strict'
import { join } from 'node:path'
import { startFakeHub } from '../support/fake-hub.ts'
import { spawnNodeProcess, startTestNode, tempDir, waitFor } from '../support/node.ts'
import { writeTinyGguf } from '../support/tiny-gguf.ts'

const CATALOG_ID = 'smollm2-135m-instruct-q8_0'

// Each run of the CLI costs about 1.5 s of module loading on this machine, so each command runs once or twice here;
// the HTTP tests cover the cases.
test('models list, download, load and unload drive the node over HTTP', async (t) => {
  // The fake hub serves our tiny GGUF under the catalog entry's real repo and file name
  const hub = await startFakeHub()
  t.after(() => hub.close())
  const gguf = await writeTinyGguf(join(await tempDir(t), 'tiny.gguf'))
  await hub.addFile('HuggingFaceTB/SmolLM2-135M-Instruct-GGUF', 'smollm2-135m-instruct-q8_0.gguf', gguf.path)
  const { node, dataDir } = await startTestNode(t, { hfEndpoint: hub.url })
  const common = ['--url', node.url, '--data-dir', dataDir]

  const list = await meshnode(['models', 'list', ...common])
  assert.equal(list.code, 0, list.stderr)
  assert.match(list.stdout, /^ID\s+NAME\s+PARAMS\s+QUANT\s+SIZE\s+STATUS$/m)
  assert.match(list.stdout, new RegExp(`^${CATALOG_ID}\\s+SmolLM2 135M Instruct\\s+135M\\s+Q8_0\\s+145\\.0 MB\\s+available$`, 'm'))

  const download = await meshnode(['models', 'download', CATALOG_ID.toUpperCase(), ...common])
  assert.equal(download.code, 0, download.stderr)
  assert.match(download.stdout, new RegExp(`^Downloaded ${CATALOG_ID} \\(621\\.4 kB\\)`, 'm'))
  assert.match(download.stderr, new RegExp(`Downloading ${CATALOG_ID}`))
  const again = await meshnode(['models', 'download', CATALOG_ID, ...common, '--json'])
  assert.equal(again.code, 0, again.stderr)
  const record = JSON.parse(again.stdout)
  assert.deepEqual([record.modelID, record.status, record.sizeBytes], [CATALOG_ID, 'downloaded', gguf.sizeBytes])

  const load = await meshnode(['models', 'load', CATALOG_ID, ...common])
  assert.equal(load.code, 0, load.stderr)
  assert.match(load.stdout, new RegExp(`^Loaded ${CATALOG_ID} \\(context \\d+ tokens\\)`))
  assert.equal(node.engine.loaded()?.modelID, CATALOG_ID)

  // A second model beside it: list and status show both with what each does; unload takes one by name, then the rest
  const second = await writeTinyGguf(join(await tempDir(t), 'second.gguf'), { seed: 2 })
  assert.equal((await node.models.import(second.path, 'second-model')).modelID, 'second-model')
  await node.models.load('second-model')
  const both = await meshnode(['models', 'list', ...common])
  assert.match(both.stdout, new RegExp(`^${CATALOG_ID}\\s.*loaded: 0/2 slots busy, [\\d.]+ [kM]B, stays$`, 'm'))
  assert.match(both.stdout, /^second-model\s.*loaded: 0\/2 slots busy, [\d.]+ [kM]B, stays$/m)
  const status = await meshnode(['status', ...common])
  assert.match(status.stdout, new RegExp(`^loaded\\s+(${CATALOG_ID}|second-model) \\(0/2 slots busy.*\\)\\n\\s+(${CATALOG_ID}|second-model) \\(`, 'm'))
  const one = await meshnode(['models', 'unload', 'second-model', ...common])
  assert.equal(one.code, 0, one.stderr)
  assert.equal(one.stdout.trim(), 'Unloaded second-model')
  assert.deepEqual(node.engine.loadedModels().map((model) => model.modelID), [CATALOG_ID])

  const unload = await meshnode(['models', 'unload', ...common])
  assert.equal(unload.code, 0, unload.stderr)
  assert.equal(unload.stdout.trim(), `Unloaded ${CATALOG_ID}`)

  const unknown = await meshnode(['models', 'load', 'qwen-7b', ...common])
  assert.equal(unknown.code, 1)
  assert.match(unknown.stderr, /Model not found: qwen-7b .*\(HTTP 404\)/)
  const failing = await meshnode(['models', 'download', 'hf.co/meshnode-test/none/x.gguf', ...common])
  assert.equal(failing.code, 1)
  assert.match(failing.stderr, /Model not found: hf\.co\/meshnode-test\/none\/x\.gguf .*\(HTTP 404\)/)
})

test('models load of a model still downloading says to wait for it, and how to follow it', async (t) => {
  const hub = await startFakeHub()
  t.after(() => hub.close())
  const gguf = await writeTinyGguf(join(await tempDir(t), 'tiny.gguf'))
  await hub.addFile('meshnode-test/tiny-GGUF', 'tiny.gguf', gguf.path)
  const { node, dataDir, api } = await startTestNode(t, { hfEndpoint: hub.url })
  const modelID = 'hf.co/meshnode-test/tiny-GGUF/tiny.gguf'
  hub.stallAfterBytes(Math.floor(gguf.sizeBytes / 2)) // the download stays under way, half done
  assert.equal((await api.post('/v1/app/models/download', { modelID })).body.status, 'downloading')
  await waitFor(async () => (await api.get('/v1/app/models')).body.models
    .some((m: { modelID: string, status: string, progress: { receivedBytes: number } | null }) => m.modelID === modelID && m.status === 'downloading' && (m.progress?.receivedBytes ?? 0) > 0),
  { what: 'the download to be under way' })

  const load = await meshnode(['models', 'load', modelID, '--url', node.url, '--data-dir', dataDir])
  assert.equal(load.code, 1)
  assert.match(load.stderr, /^meshnode: Model hf\.co\/meshnode-test\/tiny-GGUF\/tiny\.gguf is still downloading \(\d+%\): wait for it to finish \(`meshnode models download hf\.co\/meshnode-test\/tiny-GGUF\/tiny\.gguf` follows it\) \(HTTP 409\)\n$/)
})

test('models download reports a failed download and exits non-zero', async (t) => {
  const hub = await startFakeHub()
  t.after(() => hub.close())
  const gguf = await writeTinyGguf(join(await tempDir(t), 'tiny.gguf'))
  await hub.addFile('meshnode-test/tiny-GGUF', 'tiny.gguf', gguf.path)
  const { node, dataDir } = await startTestNode(t, { hfEndpoint: hub.url })
  hub.corruptNext()

  const result = await meshnode(['models', 'download', 'hf.co/meshnode-test/tiny-GGUF/tiny.gguf', '--url', node.url, '--data-dir', dataDir])
  assert.equal(result.code, 1)
  assert.match(result.stderr, /Download of hf\.co\/meshnode-test\/tiny-GGUF\/tiny\.gguf failed: Integrity check/)
})

test('models import registers a file by a path relative to where the command runs; serve --model loads one at start', async (t) => {
  const outside = await tempDir(t, 'meshnode-user-models-')
  const gguf = await writeTinyGguf(join(outside, 'tiny.gguf'), { seed: 11 })
  const { node, dataDir } = await startTestNode(t)
  const common = ['--url', node.url, '--data-dir', dataDir]

  const imported = await meshnode(['models', 'import', 'tiny.gguf', '--id', 'cli-model', ...common], { cwd: outside })
  assert.equal(imported.code, 0, imported.stderr)
  assert.equal(imported.stdout.trim(), `Imported cli-model from ${gguf.path} (621.4 kB). Load it with: meshnode models load cli-model`)
  const load = await meshnode(['models', 'load', 'cli-model', ...common])
  assert.equal(load.code, 0, load.stderr)
  assert.equal(node.engine.loaded()?.path, gguf.path, 'loaded from where it lies')
  const missing = await meshnode(['models', 'import', 'absent.gguf', ...common], { cwd: outside })
  assert.equal(missing.code, 1)
  assert.ok(missing.stderr.includes(`No file at ${join(outside, 'absent.gguf')} (HTTP 404)`), missing.stderr)
  const notGguf = await meshnode(['models', 'import', join(import.meta.dirname, 'models.test.ts'), ...common])
  assert.equal(notGguf.code, 1)
  assert.match(notGguf.stderr, /is not a GGUF file .*\(HTTP 400\)/)

  const served = await spawnNodeProcess(t, ['--data-dir', await tempDir(t), '--model', gguf.path])
  const model = await waitFor(async () => {
    const app = await (await fetch(`${served.url}/v1/app`)).json() as { model: { modelID: string, status: string } | null }
    return app.model?.status === 'loaded' ? app.model : undefined
  }, { what: 'the --model file to load' })
  assert.equal(model.modelID, 'tiny')
  const refused = await meshnode(['serve', '--port', '0', '--data-dir', await tempDir(t), '--model', join(outside, 'nothing.gguf')])
  assert.equal(refused.code, 1)
  assert.match(refused.stderr, /cannot start: No file at .*nothing\.gguf/)
})
