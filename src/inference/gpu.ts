// Which llama.cpp build runs the models: CPU or a GPU backend (CUDA, Vulkan, Metal). The default install is CPU only
// and small: package.json replaces node-llama-cpp's optional GPU packages (hundreds of MB each) with a stub.
// `meshnode gpu install <backend>` puts the prebuilt package of this platform in `<dataDir>/gpu` (never a build from
// source), and a module resolution hook lets node-llama-cpp find it there. `serve --gpu` picks the backend: `auto`
// tries the installed ones, best first, and falls back to the CPU with the reason; a named one must work or the node
// does not start.
import { existsSync, readFileSync } from 'node:fs'
import { readdir, rm, stat } from 'node:fs/promises'
import { dirname, join } from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import type { Llama } from 'node-llama-cpp'
import { getSharedLlama } from './llama.ts'
import { nodeLlamaCppPatches, redirectPrebuiltBinaries } from './patches/node-llama-cpp.ts'
import { warnInactivePatches } from './patches/report.ts'

export type GpuBackend = 'cuda' | 'vulkan' | 'metal'
/** `serve --gpu`: a backend, `auto` (the best installed one that works, else the CPU) or `off` (the CPU). */
export type GpuChoice = 'auto' | GpuBackend | 'off'
export const GPU_CHOICES: readonly GpuChoice[] = ['auto', 'cuda', 'vulkan', 'metal', 'off']
/** Best first: CUDA is llama.cpp's fastest path on NVIDIA, Metal the only one on Apple, Vulkan the portable one. */
const PREFERENCE: readonly GpuBackend[] = ['cuda', 'metal', 'vulkan']

/** What the node runs on, for GET /v1/app `hardware.gpu`. */
export interface GpuStatus {
  requested: GpuChoice
  /** `cpu` when no GPU is used; null until decided (a GPU backend is tried when the node starts). */
  backend: GpuBackend | 'cpu' | null
  devices: string[]
  vramTotalBytes: number | null
  vramFreeBytes: number | null
  /** Why the CPU is used, or why a backend was passed over; null when the backend asked for runs. */
  reason: string | null
}

/** What `serve --gpu` resolves to before any native code loads: the backends to try, in order. */
export interface GpuPlan {
  choice: GpuChoice
  candidates: GpuBackend[]
  /** Why no GPU backend is a candidate (shown as the reason when the CPU runs); null when some is. */
  reason: string | null
}

/** `--gpu cuda` (or vulkan, metal) cannot work here: the message says how to fix it. */
export class GpuSetupError extends Error {
  override name = 'GpuSetupError'
}

/** The npm packages of node-llama-cpp's prebuilt binaries for `backend` on this platform, or null when it has none. */
export function gpuPackages (backend: GpuBackend, platform: NodeJS.Platform = process.platform, arch: string = process.arch): string[] | null {
  if (platform === 'darwin') return backend === 'metal' && arch === 'arm64' ? ['@node-llama-cpp/mac-arm64-metal'] : null
  const os = platform === 'linux' ? 'linux' : platform === 'win32' ? 'win' : null
  if (os == null || arch !== 'x64' || backend === 'metal') return null
  // CUDA comes in two parts: the -ext package carries the CUDA runtime libraries, so no CUDA toolkit is needed
  return backend === 'cuda' ? [`@node-llama-cpp/${os}-x64-cuda`, `@node-llama-cpp/${os}-x64-cuda-ext`] : [`@node-llama-cpp/${os}-x64-vulkan`]
}

/**
 * The backend to install for the GPU this machine shows (`detectHardware().gpu`): CUDA for NVIDIA, Vulkan for AMD
 * and Intel, Metal on Apple silicon (where it is built in); null when no GPU was found, where no backend would help.
 */
export function suggestedGpuBackend (detectedGpu: string | null, platform: NodeJS.Platform = process.platform, arch: string = process.arch): GpuBackend | null {
  if (platform === 'darwin') return gpuPackages('metal', platform, arch) == null ? null : 'metal'
  if (detectedGpu == null) return null
  const backend: GpuBackend = detectedGpu.includes('NVIDIA') ? 'cuda' : 'vulkan'
  return gpuPackages(backend, platform, arch) == null ? null : backend
}

/** node-llama-cpp's version: a prebuilt package is used only when its version is exactly this one. */
export function nodeLlamaCppVersion (): string {
  const manifest = packageManifest('node-llama-cpp')
  if (manifest?.version == null) throw new Error('cannot find node-llama-cpp\'s package.json')
  return manifest.version
}

/** The package.json of an installed package, found from its entry point; null when it does not resolve. */
function packageManifest (name: string): { name?: string, version?: string } | null {
  let entry: string
  try {
    entry = fileURLToPath(import.meta.resolve(name))
  } catch (err) {
    // not installed, or our stub, which has no entry point: the answer, not a failure
    if (['ERR_MODULE_NOT_FOUND', 'ERR_PACKAGE_PATH_NOT_EXPORTED', 'ERR_UNSUPPORTED_DIR_IMPORT'].includes((err as NodeJS.ErrnoException).code ?? '')) return null
    throw err
  }
  for (let dir = dirname(entry); dir !== dirname(dir); dir = dirname(dir)) {
    const path = join(dir, 'package.json')
    if (!existsSync(path)) continue
    const manifest = JSON.parse(readFileSync(path, 'utf8')) as { name?: string, version?: string }
    if (manifest.name === name) return manifest
  }
  return null
}

/** Where npm puts package `name` installed with `--prefix gpuDir`. */
function packageDir (gpuDir: string, name: string): string {
  return join(gpuDir, 'node_modules', ...name.split('/'))
}

/** Where a package installed by `meshnode gpu install` lies, or null when it is not there in the right version. */
function installedPackage (gpuDir: string, name: string, version: string): string | null {
  const dir = packageDir(gpuDir, name)
  try {
    const manifest = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as { version?: string }
    return manifest.version === version ? dir : null
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null // not installed: the common case
    throw err
  }
}

/**
 * Removes what `meshnode gpu install <backend>` put in `gpuDir` (its packages, whatever their version), and `gpuDir`
 * itself once no GPU package is left in it. Returns the bytes freed; 0 when none was there. A running node keeps the
 * binary it loaded until it restarts.
 */
export async function uninstallGpuBackend (gpuDir: string, backend: GpuBackend): Promise<number> {
  let freed = 0
  for (const name of gpuPackages(backend) ?? []) {
    const dir = packageDir(gpuDir, name)
    if (!existsSync(dir)) continue
    freed += await directoryBytes(dir)
    await rm(dir, { recursive: true, force: true })
  }
  // The rest of the dir is npm's own bookkeeping of the install (its lock file, empty scope folders)
  if (gpuBackendsInDir(gpuDir).length === 0 && existsSync(gpuDir)) await rm(gpuDir, { recursive: true, force: true })
  return freed
}

/** The backends with any package of theirs in `gpuDir`, whatever its version: what `uninstallGpuBackend` can remove. */
export function gpuBackendsInDir (gpuDir: string): GpuBackend[] {
  if (!existsSync(join(gpuDir, 'node_modules'))) return []
  return PREFERENCE.filter((backend) => (gpuPackages(backend) ?? []).some((name) => existsSync(packageDir(gpuDir, name))))
}

/** Bytes the packages of `backend` installed in `gpuDir` take, or null when none of them is there. */
export async function installedGpuBytes (gpuDir: string, backend: GpuBackend): Promise<number | null> {
  const dirs = (gpuPackages(backend) ?? []).map((name) => packageDir(gpuDir, name)).filter((dir) => existsSync(dir))
  if (dirs.length === 0) return null
  let bytes = 0
  for (const dir of dirs) bytes += await directoryBytes(dir)
  return bytes
}

async function directoryBytes (dir: string): Promise<number> {
  let bytes = 0
  for (const entry of await readdir(dir, { withFileTypes: true, recursive: true })) {
    if (entry.isFile()) bytes += (await stat(join(entry.parentPath, entry.name))).size
  }
  return bytes
}

/** Whether the install itself holds the real package (Metal on Apple silicon is part of it), not our stub. */
function bundledPackage (name: string, version: string): boolean {
  return packageManifest(name)?.version === version
}

/** The GPU backends whose prebuilt packages this machine has (in `gpuDir` or in the install itself), best first. */
export function installedGpuBackends (gpuDir: string): GpuBackend[] {
  const version = nodeLlamaCppVersion()
  return PREFERENCE.filter((backend) => {
    const packages = gpuPackages(backend)
    if (packages == null) return false
    const main = packages[0]
    return installedPackage(gpuDir, main, version) != null || bundledPackage(main, version)
  })
}

/**
 * Decides, before any native code loads, which backends the node will try. Throws GpuSetupError for a named backend
 * that this platform has no build of, or that is not installed (naming `meshnode gpu install <backend>`).
 */
export function planGpu (choice: GpuChoice, gpuDir: string, detectedGpu: string | null): GpuPlan {
  if (choice === 'off') return { choice, candidates: [], reason: 'the GPU is off (--gpu off)' }
  const installed = installedGpuBackends(gpuDir)
  if (choice !== 'auto') {
    if (gpuPackages(choice) == null) {
      throw new GpuSetupError(`--gpu ${choice}: node-llama-cpp has no ${choice} build for ${process.platform}-${process.arch}; use --gpu auto or --gpu off`)
    }
    if (!installed.includes(choice)) {
      throw new GpuSetupError(`--gpu ${choice}: the ${choice} binary is not installed. Install it with: meshnode gpu install ${choice} (then start the node again), or use --gpu auto to fall back to the CPU`)
    }
    useInstalledPackages(gpuDir)
    return { choice, candidates: [choice], reason: null }
  }
  if (installed.length > 0) {
    useInstalledPackages(gpuDir)
    return { choice, candidates: installed, reason: null }
  }
  const offered = PREFERENCE.filter((backend) => gpuPackages(backend) != null)
  const suggested = suggestedGpuBackend(detectedGpu)
  // Advice to install is for a machine that has a GPU: on any other, the download would buy nothing
  const reason = offered.length === 0
    ? `node-llama-cpp has no GPU build for ${process.platform}-${process.arch}`
    : suggested == null
      ? 'no GPU was found on this machine'
      : `no GPU binary is installed (${detectedGpu == null ? 'this machine has a GPU' : `an ${detectedGpu} is present`}); install one with: meshnode gpu install ${suggested}`
  return { choice, candidates: [], reason }
}

/**
 * Points node-llama-cpp's imports of its binary packages at those installed in `gpuDir` (the `prebuilt-binary-redirect`
 * patch, patches/node-llama-cpp.ts): it imports them by bare name from its own folder, where only the stub is.
 */
function useInstalledPackages (gpuDir: string): void {
  const version = nodeLlamaCppVersion()
  const packages = new Map<string, string>()
  for (const backend of PREFERENCE) {
    for (const name of gpuPackages(backend) ?? []) {
      const dir = installedPackage(gpuDir, name, version)
      if (dir != null) packages.set(name, pathToFileURL(join(dir, 'dist', 'index.js')).href)
    }
  }
  redirectPrebuiltBinaries(packages)
}

export interface AcceleratorLogger {
  info: (obj: object, msg?: string) => void
  warn: (obj: object, msg?: string) => void
}

/**
 * The llama.cpp backend of this node, chosen once from its plan: the first candidate that starts, else the CPU (for
 * `auto`; a named backend that fails is an error). Every engine of the process asks it for its Llama. Once llama.cpp
 * runs, it warns of each patch of node-llama-cpp that did not take (patches/node-llama-cpp.ts).
 */
export class Accelerator {
  readonly #plan: GpuPlan
  readonly #log: AcceleratorLogger | null
  #status: GpuStatus
  #llama: Promise<Llama> | null = null

  constructor (plan: GpuPlan, deps: { log?: AcceleratorLogger } = {}) {
    this.#plan = plan
    this.#log = deps.log ?? null
    this.#status = {
      requested: plan.choice,
      backend: plan.candidates.length === 0 ? 'cpu' : null,
      devices: [],
      vramTotalBytes: null,
      vramFreeBytes: null,
      reason: plan.reason
    }
  }

  /** The CPU build, no GPU: what tests and benches use unless they say otherwise. */
  static cpu (): Accelerator {
    return new Accelerator({ choice: 'off', candidates: [], reason: 'the GPU is off (--gpu off)' })
  }

  status (): GpuStatus {
    return { ...this.#status, devices: [...this.#status.devices] }
  }

  /** The backend chosen (cpu, cuda, …), or null while undecided. */
  backend (): GpuBackend | 'cpu' | null {
    return this.#status.backend
  }

  /** The process's Llama for this plan, started on first use. GpuSetupError when a named backend does not start. */
  async llama (threads: number): Promise<Llama> {
    this.#llama ??= this.#start(threads).then(async (llama) => {
      if (this.#log != null) warnInactivePatches(this.#log, await nodeLlamaCppPatches())
      return llama
    })
    const llama = await this.#llama
    if (llama.maxThreads < threads) llama.maxThreads = threads
    return llama
  }

  async #start (threads: number): Promise<Llama> {
    const failures: string[] = []
    for (const backend of this.#plan.candidates) {
      try {
        const llama = await getSharedLlama(threads, backend)
        const [devices, vram] = await Promise.all([llama.getGpuDeviceNames(), llama.getVramState()])
        this.#status = { requested: this.#plan.choice, backend, devices, vramTotalBytes: vram.total, vramFreeBytes: vram.free, reason: failures.length === 0 ? null : failures.join('; ') }
        this.#log?.info({ backend, devices, vramTotalBytes: vram.total }, 'llama.cpp runs on the GPU')
        return llama
      } catch (err) {
        const message = `${backend} did not start: ${startFailure(backend, err)}`
        if (this.#plan.choice !== 'auto') {
          this.#llama = null // a later call tries again, and fails the same way, rather than reporting a stale promise
          throw new GpuSetupError(`--gpu ${backend}: ${message}`)
        }
        failures.push(message)
      }
    }
    const llama = await getSharedLlama(threads, false)
    const reason = this.#plan.reason ?? failures.join('; ')
    this.#status = { requested: this.#plan.choice, backend: 'cpu', devices: [], vramTotalBytes: null, vramFreeBytes: null, reason }
    if (this.#plan.candidates.length > 0) this.#log?.warn({ reason }, 'llama.cpp runs on the CPU: no installed GPU backend works here')
    return llama
  }
}

/** Why a backend did not start, in words a user can act on. */
function startFailure (backend: GpuBackend, err: unknown): string {
  // node-llama-cpp's word for "no binary of the package loaded": a missing driver or runtime library, or a broken install
  if (err instanceof Error && (err.constructor.name === 'NoBinaryFoundError' || err.message === 'NoBinaryFoundError')) {
    return `no ${backend} binary loads on this machine (is the GPU driver installed? else reinstall: meshnode gpu install ${backend})`
  }
  return err instanceof Error ? (err.message === '' ? err.name : err.message) : String(err)
}
