// `meshnode gpu`: what this machine can run llama.cpp on, and the steps that add or remove a GPU backend: npm
// installs node-llama-cpp's prebuilt package for this platform into `<dataDir>/gpu` (never a build from source), after
// saying how large it is and asking; the node finds it there at its next start (serve --gpu auto or --gpu <backend>).
import { spawn } from 'node:child_process'
import { join } from 'node:path'
import type { Command } from 'commander'
import { defaultDataDir } from '../../config.ts'
import type { AppSnapshot } from '../../http/schemas/app.ts'
import {
  gpuBackendsInDir, gpuPackages, installedGpuBackends, installedGpuBytes, nodeLlamaCppVersion, suggestedGpuBackend, uninstallGpuBackend, type GpuBackend
} from '../../inference/index.ts'
import { detectHardware } from '../../system/hardware.ts'
import { ApiError } from '../client.ts'
import { formatPairs, print } from '../output.ts'
import { inTerminal, promptLine } from '../prompt.ts'
import { UsageError, clientFor, withClientOptions } from './common.ts'

const BACKENDS: readonly GpuBackend[] = ['cuda', 'vulkan', 'metal']
const DATA_DIR_HELP = 'the node\'s data dir: the binaries are in <dir>/gpu (default $MESHNODE_DATA_DIR or ~/.meshnode)'

type NodeGpu = AppSnapshot['hardware']['gpu']

export function registerGpu (program: Command): void {
  const gpu = program.command('gpu').description('GPU backends for llama.cpp: whether a GPU was found, what is installed; install or uninstall one')

  withClientOptions(gpu.command('status').description('whether this machine has a GPU, the GPU backends installed, and what the running node uses'))
    .action(async (_options, command: Command) => {
      const { client, options } = clientFor(command)
      const gpuDir = join(options.dataDir ?? defaultDataDir(), 'gpu')
      const installed = installedGpuBackends(gpuDir)
      let node: NodeGpu | null = null
      try {
        node = (await client.get<AppSnapshot>('/v1/app')).hardware.gpu
      } catch (err) {
        if (!(err instanceof ApiError && err.status === 0)) throw err // no node running: the local facts still stand
      }
      const detected = detectHardware().gpu
      const suggested = suggestedGpuBackend(detected)
      const status = {
        platform: `${process.platform}-${process.arch}`,
        nodeLlamaCpp: nodeLlamaCppVersion(),
        detected,
        gpuFound: detected != null || suggested === 'metal',
        /** The backend for this machine's GPU; null when no GPU was found. */
        suggested,
        gpuDir,
        backends: BACKENDS.map((backend) => ({ backend, available: gpuPackages(backend) != null, installed: installed.includes(backend) })),
        node
      }
      const sizes = new Map(await Promise.all(installed.map(async (backend) => [backend, await installedGpuBytes(gpuDir, backend)] as const)))
      print(status, options.json, () => formatPairs([
        ['platform', `${status.platform} (node-llama-cpp ${status.nodeLlamaCpp})`],
        ['GPU found', suggested === 'metal' ? 'Apple silicon (Metal is part of the install)' : detected ?? 'none: llama.cpp runs on the CPU, and no GPU backend would help'],
        ...(suggested == null || installed.includes(suggested) ? [] : [['advice', `meshnode gpu install ${suggested} (says its size and asks first)`] as [string, string]]),
        ...status.backends.map(({ backend, available, installed }): [string, string] => [backend,
          !available ? 'no build for this platform' : !installed ? 'not installed' : sizes.get(backend) == null ? 'installed (part of the install)' : `installed (${megabytes(sizes.get(backend) ?? 0)} in ${gpuDir})`]),
        ['node uses', describeNode(node, installed)]
      ]))
    })

  gpu.command('install')
    .argument('[backend]', 'cuda or vulkan (default: the one for the GPU found: cuda for NVIDIA, vulkan for AMD and Intel)')
    .option('--data-dir <dir>', DATA_DIR_HELP, defaultDataDir())
    .option('-y, --yes', 'download without asking (needed where there is no terminal to ask in)')
    .option('--dry-run', 'print the npm command instead of running it')
    .description('install node-llama-cpp\'s prebuilt GPU binary for this platform (from npm, never built from source): says its size and asks first')
    .action(async (requested: string | undefined, options: { dataDir: string, yes?: boolean, dryRun?: boolean }) => {
      const backend = requested ?? suggestedGpuBackend(detectHardware().gpu)
      if (backend == null) {
        throw new UsageError('no GPU was found on this machine, so no backend would help. To install one anyway, name it: meshnode gpu install cuda (or vulkan)')
      }
      if (!(BACKENDS as readonly string[]).includes(backend)) throw new UsageError(`backend must be cuda or vulkan, not ${backend}`)
      const packages = gpuPackages(backend as GpuBackend)
      if (packages == null) throw new Error(`node-llama-cpp has no prebuilt ${backend} binary for ${process.platform}-${process.arch}`)
      const gpuDir = join(options.dataDir, 'gpu')
      if (installedGpuBackends(gpuDir).includes(backend as GpuBackend)) {
        process.stdout.write(`The ${backend} binary is installed already (${gpuDir}). Start the node with: meshnode serve (--gpu auto uses it)\n`)
        return
      }
      const version = nodeLlamaCppVersion()
      const specs = packages.map((name) => `${name}@${version}`)
      const [command, ...args] = npmCommand(['install', '--prefix', gpuDir, '--no-save', '--no-package-lock', '--ignore-scripts', '--no-audit', '--no-fund', ...specs])
      if (options.dryRun === true) {
        process.stdout.write([command, ...args].join(' ') + '\n')
        return
      }
      const bytes = await packagesBytes(specs)
      const size = bytes == null ? 'of a size npm does not say' : `of about ${megabytes(bytes)}`
      const what = `node-llama-cpp ${version}'s ${backend} binary, a download ${size} into ${gpuDir}`
      if (options.yes !== true) {
        if (!inTerminal()) throw new UsageError(`gpu install fetches ${what}: pass --yes to confirm (there is no terminal to ask in)`)
        const answer = (await promptLine(`Install ${what}? [y/N] `)).toLowerCase()
        if (answer !== 'y' && answer !== 'yes') throw new Error('nothing was installed: the download was not confirmed')
      }
      process.stderr.write(`Installing ${what}...\n`)
      const code = await new Promise<number | null>((resolve, reject) => {
        const child = spawn(command, args, { stdio: 'inherit', shell: process.platform === 'win32' })
        child.once('error', reject)
        child.once('exit', resolve)
      })
      if (code !== 0) throw new Error(`npm install failed (exit code ${String(code)}); nothing was changed for the node`)
      if (!installedGpuBackends(gpuDir).includes(backend as GpuBackend)) throw new Error(`npm finished, but no ${backend} binary of node-llama-cpp ${version} is in ${gpuDir}`)
      process.stdout.write(`Installed the ${backend} binary in ${gpuDir}. Start (or restart) the node: meshnode serve (--gpu auto uses it; --gpu ${backend} insists). meshnode gpu uninstall ${backend} removes it\n`)
    })

  gpu.command('uninstall')
    .argument('[backend]', 'cuda or vulkan (default: every one installed)')
    .option('--data-dir <dir>', DATA_DIR_HELP, defaultDataDir())
    .description('remove what gpu install added; a running node keeps using the binary until it restarts')
    .action(async (requested: string | undefined, options: { dataDir: string }) => {
      if (requested != null && !(BACKENDS as readonly string[]).includes(requested)) throw new UsageError(`backend must be cuda, vulkan or metal, not ${requested}`)
      const gpuDir = join(options.dataDir, 'gpu')
      const present = gpuBackendsInDir(gpuDir)
      const targets = requested == null ? present : present.filter((backend) => backend === requested)
      if (targets.length === 0) {
        const bundled = requested != null && installedGpuBackends(gpuDir).includes(requested as GpuBackend)
        process.stdout.write(bundled
          ? `The ${requested ?? ''} binary is part of meshnode's own install, not of ${gpuDir}: there is nothing to uninstall\n`
          : `No ${requested ?? 'GPU'} binary is installed in ${gpuDir}: nothing to remove\n`)
        return
      }
      for (const backend of targets) {
        const freed = await uninstallGpuBackend(gpuDir, backend)
        process.stdout.write(`Removed the ${backend} binary from ${gpuDir} (${megabytes(freed)} freed)\n`)
      }
      process.stdout.write('A running node keeps the binary it loaded until it restarts: meshnode serve then runs on the CPU or another installed backend\n')
    })
}

/** What the running node uses, and whether an install or uninstall since it started changes that at its restart. */
function describeNode (node: NodeGpu | null, installed: GpuBackend[]): string {
  if (node == null) return 'no node running'
  const used = `${node.backend ?? 'deciding'}${node.devices.length > 0 ? ` (${node.devices.join(', ')})` : ''}`
  const backend = node.backend
  if (backend != null && backend !== 'cpu' && !installed.includes(backend)) {
    return `${used}, but its binary was uninstalled since the node started: after a restart it runs on ${installed[0] ?? 'the CPU'}`
  }
  // A node that found nothing installed when it started (rather than one whose backend failed) tries what is now
  const failed = installed.some((b) => node.reason?.includes(`${b} did not start`) === true)
  if (backend === 'cpu' && node.requested === 'auto' && installed.length > 0 && !failed) {
    return `cpu, as the node started before the ${installed.join(' and ')} binary was installed: restart it to use the GPU`
  }
  return `${used}${node.reason == null ? '' : `: ${node.reason}`}`
}

/** The unpacked size npm's registry gives for each package, summed; null when it gives none for some. */
async function packagesBytes (specs: string[]): Promise<number | null> {
  const sizes = await Promise.all(specs.map(async (spec) => {
    const out = (await npmOutput(['view', spec, 'dist.unpackedSize', '--json'])).trim()
    const size = out === '' ? null : JSON.parse(out) as unknown
    return typeof size === 'number' ? size : null
  }))
  return sizes.some((size) => size == null) ? null : sizes.reduce<number>((sum, size) => sum + (size ?? 0), 0)
}

/** Runs npm and returns what it printed; a failure is an error with npm's own last words. */
async function npmOutput (args: string[]): Promise<string> {
  const [command, ...rest] = npmCommand(args)
  const child = spawn(command, rest, { stdio: ['ignore', 'pipe', 'pipe'], shell: process.platform === 'win32' })
  let stdout = ''
  let stderr = ''
  child.stdout.on('data', (chunk: Buffer) => { stdout += chunk.toString() })
  child.stderr.on('data', (chunk: Buffer) => { stderr += chunk.toString() })
  const code = await new Promise<number | null>((resolve, reject) => {
    child.once('error', reject)
    child.once('close', resolve)
  })
  if (code !== 0) {
    const said = stderr.trim().split('\n').filter((line) => line.trim() !== '').slice(-2).join(' ')
    throw new Error(`cannot ask npm for the size of the download (npm ${args[0]} exit code ${String(code)}): ${said}`)
  }
  return stdout
}

/** Decimal units, as npm and disks count them: `538 MB`, `4.2 MB`, `12 kB`. */
function megabytes (bytes: number): string {
  if (bytes < 1e6) return `${Math.ceil(bytes / 1e3)} kB`
  return `${(bytes / 1e6).toFixed(bytes < 10e6 ? 1 : 0)} MB`
}

/** npm as the user runs it: the npm that runs us (npm start, npx), else the one on PATH. */
function npmCommand (args: string[]): string[] {
  const npmCli = process.env.npm_execpath
  if (npmCli != null && npmCli.endsWith('.js')) return [process.execPath, npmCli, ...args]
  return [process.platform === 'win32' ? 'npm.cmd' : 'npm', ...args]
}
