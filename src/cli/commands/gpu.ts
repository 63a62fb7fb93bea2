// `meshnode gpu`: what this machine can run llama.cpp on, and the one step that adds a GPU backend: npm installs
// node-llama-cpp's prebuilt package for this platform into `<dataDir>/gpu` (never a build from source); the node
// finds it there at its next start (serve --gpu auto or --gpu <backend>).
import { spawn } from 'node:child_process'
import { join } from 'node:path'
import type { Command } from 'commander'
import { defaultDataDir } from '../../config.ts'
import type { AppSnapshot } from '../../http/schemas/app.ts'
import { gpuPackages, installedGpuBackends, nodeLlamaCppVersion, type GpuBackend } from '../../inference/gpu.ts'
import { detectHardware } from '../../system/hardware.ts'
import { ApiError } from '../client.ts'
import { formatPairs, print } from '../output.ts'
import { UsageError, clientFor, withClientOptions } from './common.ts'

const BACKENDS: readonly GpuBackend[] = ['cuda', 'vulkan', 'metal']

export function registerGpu (program: Command): void {
  const gpu = program.command('gpu').description('GPU backends for llama.cpp: what is installed, and installing one')

  withClientOptions(gpu.command('status').description('the GPU backends this machine has, and what the running node uses'))
    .action(async (_options, command: Command) => {
      const { client, options } = clientFor(command)
      const gpuDir = join(options.dataDir ?? defaultDataDir(), 'gpu')
      const installed = installedGpuBackends(gpuDir)
      let node: AppSnapshot['hardware']['gpu'] | null = null
      try {
        node = (await client.get<AppSnapshot>('/v1/app')).hardware.gpu
      } catch (err) {
        if (!(err instanceof ApiError && err.status === 0)) throw err // no node running: the local facts still stand
      }
      const status = {
        platform: `${process.platform}-${process.arch}`,
        nodeLlamaCpp: nodeLlamaCppVersion(),
        detected: detectHardware().gpu,
        gpuDir,
        backends: BACKENDS.map((backend) => ({ backend, available: gpuPackages(backend) != null, installed: installed.includes(backend) })),
        node
      }
      print(status, options.json, () => formatPairs([
        ['platform', `${status.platform} (node-llama-cpp ${status.nodeLlamaCpp})`],
        ['GPU seen', status.detected ?? 'none that the OS shows without drivers\' tools'],
        ...status.backends.map(({ backend, available, installed }): [string, string] => [backend,
          !available ? 'no build for this platform' : installed ? 'installed' : `not installed (meshnode gpu install ${backend})`]),
        ['node uses', node == null ? 'no node running' : `${node.backend ?? 'deciding'}${node.devices.length > 0 ? ` (${node.devices.join(', ')})` : ''}${node.reason == null ? '' : `: ${node.reason}`}`]
      ]))
    })

  gpu.command('install')
    .argument('[backend]', 'cuda or vulkan (default: cuda when an NVIDIA GPU shows, else vulkan)')
    .option('--data-dir <dir>', 'the node\'s data dir: the binaries go to <dir>/gpu (default $MESHNODE_DATA_DIR or ~/.meshnode)', defaultDataDir())
    .option('--dry-run', 'print the npm command instead of running it')
    .description('install node-llama-cpp\'s prebuilt GPU binary for this platform (from npm, never built from source)')
    .action(async (requested: string | undefined, options: { dataDir: string, dryRun?: boolean }) => {
      const backend = requested ?? (process.platform === 'darwin' ? 'metal' : detectHardware().gpu?.includes('NVIDIA') === true ? 'cuda' : 'vulkan')
      if (!(BACKENDS as readonly string[]).includes(backend)) throw new UsageError(`backend must be cuda or vulkan, not ${backend}`)
      const packages = gpuPackages(backend as GpuBackend)
      if (packages == null) throw new Error(`node-llama-cpp has no prebuilt ${backend} binary for ${process.platform}-${process.arch}`)
      const gpuDir = join(options.dataDir, 'gpu')
      if (installedGpuBackends(gpuDir).includes(backend as GpuBackend)) {
        process.stdout.write(`The ${backend} binary is installed already (${gpuDir}). Start the node with: meshnode serve (--gpu auto uses it)\n`)
        return
      }
      const version = nodeLlamaCppVersion()
      const [command, ...args] = npmCommand(['install', '--prefix', gpuDir, '--no-save', '--no-package-lock', '--ignore-scripts',
        '--no-audit', '--no-fund', ...packages.map((name) => `${name}@${version}`)])
      if (options.dryRun === true) {
        process.stdout.write([command, ...args].join(' ') + '\n')
        return
      }
      process.stderr.write(`Installing node-llama-cpp ${version}'s ${backend} binary into ${gpuDir} (a download of several hundred MB)...\n`)
      const code = await new Promise<number | null>((resolve, reject) => {
        const child = spawn(command, args, { stdio: 'inherit', shell: process.platform === 'win32' })
        child.once('error', reject)
        child.once('exit', resolve)
      })
      if (code !== 0) throw new Error(`npm install failed (exit code ${String(code)}); nothing was changed for the node`)
      if (!installedGpuBackends(gpuDir).includes(backend as GpuBackend)) throw new Error(`npm finished, but no ${backend} binary of node-llama-cpp ${version} is in ${gpuDir}`)
      process.stdout.write(`Installed the ${backend} binary in ${gpuDir}. Start (or restart) the node: meshnode serve (--gpu auto uses it; --gpu ${backend} insists)\n`)
    })
}

/** npm as the user runs it: the npm that runs us (npm start, npx), else the one on PATH. */
function npmCommand (args: string[]): string[] {
  const npmCli = process.env.npm_execpath
  if (npmCli != null && npmCli.endsWith('.js')) return [process.execPath, npmCli, ...args]
  return [process.platform === 'win32' ? 'npm.cmd' : 'npm', ...args]
}
