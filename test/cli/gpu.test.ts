// GPUs one command away, and the choice of backend. The machines these tests run on usually have no GPU, so they
// cover what such a machine sees (no advice to install anything; the CPU with the reason; a named backend refused at
// start) and, where one shows, what it is advised. The install step, with its size and question, and the uninstall
// run the real npm client against a registry stand-in (whose package has no working binary).
import { test, type TestContext } from 'node:test'
import assert from 'node:assert/strict'
import { join } from 'node:path'
import { existsSync } from 'node:fs'
import { runCli as meshnode } from '../support/cli.ts'
import { startFakeRegistry, type FakeRegistry } from '../support/fake-npm-registry.ts'
import { spawnNodeProcess, startTestNode, tempDir, waitFor } from '../support/node.ts'
import { HAS_TERMINAL, runCliInTerminal } from '../support/terminal.ts'
import { writeTinyGguf } from '../support/tiny-gguf.ts'
import { gpuPackages, nodeLlamaCppVersion, suggestedGpuBackend } from '../../src/inference/gpu.ts'
import { detectHardware } from '../../src/system/hardware.ts'

const hasCudaBuild = gpuPackages('cuda') != null
const vulkanPackage = gpuPackages('vulkan')?.[0] ?? null
/** What this machine shows, and the backend it is advised: null where no GPU was found. */
const detected = detectHardware().gpu
const suggested = suggestedGpuBackend(detected)

/** A registry stand-in serving the Vulkan package in node-llama-cpp's shape (getBinsDir) but with no binary in it. */
async function vulkanRegistry (t: TestContext): Promise<{ registry: FakeRegistry, npmEnv: Record<string, string> }> {
  const version = nodeLlamaCppVersion()
  const registry = await startFakeRegistry([{
    name: vulkanPackage ?? '',
    version,
    files: {
      'dist/index.js': `import { fileURLToPath } from 'node:url'\nexport function getBinsDir () { return { binsDir: fileURLToPath(new URL('../bins', import.meta.url)), packageVersion: ${JSON.stringify(version)} } }\n`,
      'bins/README': 'no binary here\n'
    }
  }])
  t.after(() => registry.close())
  return { registry, npmEnv: { npm_config_registry: `${registry.url}/`, npm_config_cache: await tempDir(t, 'meshnode-npm-cache-') } }
}

test('with no GPU binary installed, --gpu auto runs on the CPU and /v1/app says why; the loaded model says where it runs', { skip: process.platform === 'darwin' ? 'Metal is part of the default install on macOS' : false }, async (t) => {
  const { api, node } = await startTestNode(t) // --gpu auto is the default
  const { gpu } = (await api.get('/v1/app')).body.hardware
  assert.deepEqual({ ...gpu, reason: null, detected: null }, { requested: 'auto', backend: 'cpu', devices: [], vramTotalBytes: null, vramFreeBytes: null, reason: null, detected: null })
  // Only a machine with a GPU is told to install a backend, and only the one for its GPU
  assert.match(gpu.reason, !hasCudaBuild
    ? /no GPU build/
    : suggested == null ? /^no GPU was found on this machine$/ : new RegExp(`^no GPU binary is installed \\(an ${detected ?? ''} is present\\); install one with: meshnode gpu install ${suggested}$`))

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

test('gpu status says whether a GPU was found and advises an install only where one was', { skip: process.platform === 'darwin' ? 'Metal is part of the default install on macOS' : false }, async (t) => {
  const dataDir = await tempDir(t)
  const status = await meshnode(['gpu', 'status', '--data-dir', dataDir, '--port', '1'])
  assert.equal(status.code, 0, status.stderr)
  const json = JSON.parse((await meshnode(['gpu', 'status', '--json', '--data-dir', dataDir, '--port', '1'])).stdout)
  assert.equal(json.detected, detected)
  assert.equal(json.suggested, suggested)
  assert.match(status.stdout, /^node uses\s+no node running$/m)
  assert.doesNotMatch(status.stdout, /not installed \(meshnode gpu install/, 'no install advice on every backend line')
  if (suggested == null) {
    assert.equal(json.gpuFound, false)
    assert.match(status.stdout, /^GPU found\s+none: llama\.cpp runs on the CPU, and no GPU backend would help$/m)
    assert.doesNotMatch(status.stdout, /gpu install/, 'a machine without a GPU is advised no download')
    const install = await meshnode(['gpu', 'install', '--data-dir', dataDir])
    assert.equal(install.code, 2, install.stderr)
    assert.match(install.stderr, /^meshnode: no GPU was found on this machine, so no backend would help\. To install one anyway, name it: meshnode gpu install cuda \(or vulkan\)$/m)
    assert.equal(existsSync(join(dataDir, 'gpu')), false, 'nothing was downloaded')
  } else {
    assert.equal(json.gpuFound, true)
    assert.match(status.stdout, new RegExp(`^GPU found\\s+${detected ?? ''}$`, 'm'))
    assert.match(status.stdout, new RegExp(`^advice\\s+meshnode gpu install ${suggested} `, 'm'))
  }
})

test('meshnode gpu install says the size and needs --yes without a terminal; it puts the prebuilt package in the data dir with npm, and gpu uninstall removes it; a backend that does not start is the CPU with its reason under auto, and a refused start when named', { skip: vulkanPackage == null ? 'no Vulkan build for this platform' : false }, async (t) => {
  const { registry, npmEnv } = await vulkanRegistry(t)
  const dataDir = await tempDir(t)
  const gpuDir = join(dataDir, 'gpu')
  // A node started before the install: status says that a restart would use the new binary
  const before = await startTestNode(t)

  const unconfirmed = await meshnode(['gpu', 'install', 'vulkan', '--data-dir', dataDir], { env: npmEnv })
  assert.equal(unconfirmed.code, 2, unconfirmed.stderr)
  assert.match(unconfirmed.stderr, new RegExp(`^meshnode: gpu install fetches node-llama-cpp \\S+'s vulkan binary, a download of about \\d+ kB into ${gpuDir}: pass --yes to confirm \\(there is no terminal to ask in\\)$`, 'm'))
  assert.equal(existsSync(gpuDir), false, 'nothing was downloaded')

  const installed = await meshnode(['gpu', 'install', 'vulkan', '--yes', '--data-dir', dataDir], { env: npmEnv })
  assert.equal(installed.code, 0, installed.stderr)
  assert.match(installed.stdout, new RegExp(`Installed the vulkan binary in ${gpuDir}`))
  assert.ok(registry.requests.includes(`/${vulkanPackage ?? ''}`), 'npm asked the registry for the package')
  const status = JSON.parse((await meshnode(['gpu', 'status', '--json', '--data-dir', dataDir, '--port', '1'])).stdout)
  assert.deepEqual(status.backends.find((b: { backend: string }) => b.backend === 'vulkan'), { backend: 'vulkan', available: true, installed: true })
  assert.equal(status.node, null, 'no node at that port')
  const human = (await meshnode(['gpu', 'status', '--data-dir', dataDir, '--url', before.node.url])).stdout
  assert.match(human, new RegExp(`^vulkan\\s+installed \\(\\d+ kB in ${gpuDir}\\)$`, 'm'))
  assert.match(human, /^node uses\s+cpu, as the node started before the vulkan binary was installed: restart it to use the GPU$/m)
  assert.doesNotMatch(human, /no GPU binary is installed/, 'no word contradicts the install')
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
  const failed = (await meshnode(['gpu', 'status', '--data-dir', dataDir, '--url', auto.url])).stdout
  assert.match(failed, /^node uses\s+cpu: vulkan did not start/m, 'a backend that failed is not one to restart for')

  const removed = await meshnode(['gpu', 'uninstall', 'vulkan', '--data-dir', dataDir])
  assert.equal(removed.code, 0, removed.stderr)
  assert.match(removed.stdout, new RegExp(`^Removed the vulkan binary from ${gpuDir} \\(\\d+ kB freed\\)$`, 'm'))
  assert.equal(existsSync(gpuDir), false, 'what install added is gone')
  const after = JSON.parse((await meshnode(['gpu', 'status', '--json', '--data-dir', dataDir, '--port', '1'])).stdout)
  assert.deepEqual(after.backends.find((b: { backend: string }) => b.backend === 'vulkan'), { backend: 'vulkan', available: true, installed: false })
  assert.match((await meshnode(['gpu', 'status', '--data-dir', dataDir, '--port', '1'])).stdout, /^vulkan\s+not installed$/m)
  const again = await meshnode(['gpu', 'uninstall', '--data-dir', dataDir])
  assert.equal(again.code, 0, again.stderr)
  assert.match(again.stdout, /No GPU binary is installed in .*: nothing to remove/)
  const bad = await meshnode(['gpu', 'uninstall', 'tpu', '--data-dir', dataDir])
  assert.equal(bad.code, 2)
})

test('meshnode gpu install in a terminal says the size and asks: no leaves nothing, yes installs', { skip: vulkanPackage == null ? 'no Vulkan build for this platform' : !HAS_TERMINAL ? 'no `script` to give the command a terminal' : false }, async (t) => {
  const { npmEnv } = await vulkanRegistry(t)
  const dataDir = await tempDir(t)
  const gpuDir = join(dataDir, 'gpu')

  const declined = await runCliInTerminal(['gpu', 'install', 'vulkan', '--data-dir', dataDir], { input: 'n\n', env: npmEnv })
  assert.equal(declined.code, 1, declined.output)
  assert.match(declined.output, /Install node-llama-cpp \S+'s vulkan binary, a download of about \d+ kB into .*\? \[y\/N\]/)
  assert.match(declined.output, /meshnode: nothing was installed: the download was not confirmed/)
  assert.equal(existsSync(gpuDir), false)

  const accepted = await runCliInTerminal(['gpu', 'install', 'vulkan', '--data-dir', dataDir], { input: 'y\n', env: npmEnv })
  assert.equal(accepted.code, 0, accepted.output)
  assert.match(accepted.output, /Installed the vulkan binary in /)
  assert.equal(existsSync(join(gpuDir, 'node_modules', ...(vulkanPackage ?? '').split('/'), 'package.json')), true)
})
