// Issue 10: GPUs one command away, and the choice of backend. No GPU exists on the machines these tests run on, so
// they cover what a machine without one sees: the CPU with the reason, a named backend refused at start, and the
// install step run by the real npm client against a registry stand-in (whose package has no working binary).
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { join } from 'node:path'
import { runCli as meshnode } from '../support/cli.ts'
import { startFakeRegistry } from '../support/fake-npm-registry.ts'
import { spawnNodeProcess, startTestNode, tempDir, waitFor } from '../support/node.ts'
import { writeTinyGguf } from '../support/tiny-gguf.ts'
import { gpuPackages, nodeLlamaCppVersion } from '../../src/inference/gpu.ts'

const hasCudaBuild = gpuPackages('cuda') != null
const vulkanPackage = gpuPackages('vulkan')?.[0] ?? null

test('with no GPU binary installed, --gpu auto runs on the CPU and /v1/app says why; the loaded model says where it runs', { skip: process.platform === 'darwin' ? 'Metal is part of the default install on macOS' : false }, async (t) => {
  const { api, node } = await startTestNode(t) // --gpu auto is the default
  const { gpu } = (await api.get('/v1/app')).body.hardware
  assert.deepEqual({ ...gpu, reason: null, detected: null }, { requested: 'auto', backend: 'cpu', devices: [], vramTotalBytes: null, vramFreeBytes: null, reason: null, detected: null })
  assert.match(gpu.reason, hasCudaBuild ? /^no GPU binary is installed.*; install one with: meshnode gpu install cuda or meshnode gpu install vulkan$/ : /no GPU build/)

  const { path } = await writeTinyGguf(join(await tempDir(t), 'tiny.gguf'))
  await node.engine.load('tiny', path)
  const { model } = (await api.get('/v1/app')).body
  assert.deepEqual(model.gpu, { backend: 'cpu', gpuLayers: 0, totalLayers: model.gpu.totalLayers })
  assert.ok(model.gpu.totalLayers >= 2, 'the tiny model\'s two blocks (and its output layer)')
})

test('--gpu cuda without the CUDA binary fails at start naming meshnode gpu install cuda; a bad --gpu is a usage error', { skip: hasCudaBuild ? false : 'no CUDA build for this platform' }, async (t) => {
  const dataDir = await tempDir(t)
  const refused = await meshnode(['serve', '--port', '0', '--data-dir', dataDir, '--gpu', 'cuda'])
  assert.equal(refused.code, 1)
  assert.ok(refused.stderr.includes('meshnode: cannot start: --gpu cuda: the cuda binary is not installed. Install it with: meshnode gpu install cuda'), refused.stderr)
  const bad = await meshnode(['serve', '--port', '0', '--data-dir', dataDir, '--gpu', 'tpu'])
  assert.equal(bad.code, 2)
  assert.match(bad.stderr, /--gpu must be one of auto, cuda, vulkan, metal, off, not tpu/)

  const dryRun = await meshnode(['gpu', 'install', 'cuda', '--dry-run', '--data-dir', dataDir])
  assert.equal(dryRun.code, 0, dryRun.stderr)
  const version = nodeLlamaCppVersion()
  assert.match(dryRun.stdout, new RegExp(`install --prefix ${join(dataDir, 'gpu')} .*--ignore-scripts .*@node-llama-cpp/\\w+-x64-cuda@${version} @node-llama-cpp/\\w+-x64-cuda-ext@${version}$`, 'm'))
})

test('meshnode gpu install puts the prebuilt package in the data dir with npm; a backend that does not start is the CPU with its reason under auto, and a refused start when named', { skip: vulkanPackage == null ? 'no Vulkan build for this platform' : false }, async (t) => {
  const version = nodeLlamaCppVersion()
  // The registry's package has node-llama-cpp's shape (getBinsDir) but no binary in it: this machine has no GPU anyway
  const registry = await startFakeRegistry([{
    name: vulkanPackage ?? '',
    version,
    files: {
      'dist/index.js': `import { fileURLToPath } from 'node:url'\nexport function getBinsDir () { return { binsDir: fileURLToPath(new URL('../bins', import.meta.url)), packageVersion: ${JSON.stringify(version)} } }\n`,
      'bins/README': 'no binary here\n'
    }
  }])
  t.after(() => registry.close())
  const dataDir = await tempDir(t)
  const npmEnv = { npm_config_registry: `${registry.url}/`, npm_config_cache: await tempDir(t, 'meshnode-npm-cache-') }

  const installed = await meshnode(['gpu', 'install', 'vulkan', '--data-dir', dataDir], { env: npmEnv })
  assert.equal(installed.code, 0, installed.stderr)
  assert.match(installed.stdout, new RegExp(`Installed the vulkan binary in ${join(dataDir, 'gpu')}`))
  assert.ok(registry.requests.includes(`/${vulkanPackage ?? ''}`), 'npm asked the registry for the package')
  const status = JSON.parse((await meshnode(['gpu', 'status', '--json', '--data-dir', dataDir, '--port', '1'])).stdout)
  assert.deepEqual(status.backends.find((b: { backend: string }) => b.backend === 'vulkan'), { backend: 'vulkan', available: true, installed: true })
  assert.equal(status.node, null, 'no node at that port')
  assert.match((await meshnode(['gpu', 'install', 'vulkan', '--data-dir', dataDir])).stdout, /installed already/)

  const named = await meshnode(['serve', '--port', '0', '--data-dir', dataDir, '--gpu', 'vulkan'])
  assert.equal(named.code, 1)
  assert.match(named.stderr, /meshnode: cannot start: --gpu vulkan: vulkan did not start: no vulkan binary loads on this machine/)

  const auto = await spawnNodeProcess(t, ['--data-dir', dataDir, '--gpu', 'auto'])
  const gpu = await waitFor(async () => {
    const app = await (await fetch(`${auto.url}/v1/app`)).json() as { hardware: { gpu: { backend: string | null, reason: string | null } } }
    return app.hardware.gpu.backend == null ? undefined : app.hardware.gpu
  }, { what: 'the node to decide its backend' })
  assert.equal(gpu.backend, 'cpu')
  assert.match(gpu.reason ?? '', /^vulkan did not start: no vulkan binary loads on this machine \(is the GPU driver installed\? else reinstall: meshnode gpu install vulkan\)$/)
})
