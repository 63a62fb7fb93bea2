// Builds llama-server once, from the very llama.cpp source node-llama-cpp ships (its `llama/gitRelease.bundle`), into
// a cache directory outside the repository, for bench:llama-server only: tests and CI never build anything. The build
// runs at the lowest priority on two jobs because the machine it runs on is usually shared.
import { spawn } from 'node:child_process'
import { existsSync } from 'node:fs'
import { mkdir, rm } from 'node:fs/promises'
import { homedir } from 'node:os'
import { join } from 'node:path'

/** Where the built server and the generated bench models live; override with MESHNODE_BENCH_CACHE. */
export const BENCH_CACHE = process.env.MESHNODE_BENCH_CACHE ?? join(homedir(), '.cache', 'meshnode-bench')
const BUNDLE = join(import.meta.dirname, '..', 'node_modules', 'node-llama-cpp', 'llama', 'gitRelease.bundle')

async function run (command: string, args: string[], cwd: string): Promise<void> {
  console.error(`$ ${command} ${args.join(' ')}`)
  const child = spawn(command, args, { cwd, stdio: ['ignore', 'inherit', 'inherit'] })
  const code = await new Promise<number | null>((resolve, reject) => {
    child.once('error', reject)
    child.once('exit', resolve)
  })
  if (code !== 0) throw new Error(`${command} ${args.join(' ')} exited with ${code}`)
}

/**
 * How llama-server is built. `native`: for this machine's CPU (`-DGGML_NATIVE=ON`), llama.cpp's fastest build here and
 * the comparison the issue asks for. `release`: as llama.cpp's release binaries and node-llama-cpp's prebuilt ones are
 * built (`GGML_NATIVE=OFF`, every x86/ARM CPU variant as a loadable backend, the best one picked at start), so both
 * engines run the very same ggml kernels and what differs is only how they are driven.
 */
export type LlamaServerBuild = 'native' | 'release'

/** The path of a llama-server built from node-llama-cpp's bundled llama.cpp; builds it first if absent (~15-30 min). */
export async function ensureLlamaServer (kind: LlamaServerBuild = 'native'): Promise<string> {
  const source = join(BENCH_CACHE, 'llama.cpp')
  const directory = kind === 'native' ? 'build' : 'build-release'
  const build = join(source, directory)
  const binary = join(build, 'bin', 'llama-server')
  if (existsSync(binary)) return binary
  await mkdir(BENCH_CACHE, { recursive: true })
  if (!existsSync(join(source, 'CMakeLists.txt'))) {
    await rm(source, { recursive: true, force: true })
    await run('git', ['clone', '--quiet', BUNDLE, source], BENCH_CACHE)
  }
  const flags = kind === 'native'
    ? ['-DGGML_NATIVE=ON']
    : ['-DGGML_NATIVE=OFF', '-DGGML_BACKEND_DL=ON', '-DGGML_CPU_ALL_VARIANTS=ON']
  await run('nice', ['-n', '19', 'cmake', '-S', '.', '-B', directory, '-DCMAKE_BUILD_TYPE=Release', '-DLLAMA_CURL=OFF',
    ...flags, '-DLLAMA_BUILD_TESTS=OFF', '-DLLAMA_BUILD_EXAMPLES=OFF'], source)
  // With loadable backends the CPU variants are modules llama-server does not link, so they are named as targets too.
  const targets = ['llama-server', ...(kind === 'native' ? [] : await cpuVariantTargets(source, directory))]
  await run('nice', ['-n', '19', 'cmake', '--build', directory, '--config', 'Release', '--target', ...targets, '-j', '2'], source)
  if (!existsSync(binary)) throw new Error(`the build finished without ${binary}`)
  return binary
}

async function cpuVariantTargets (source: string, directory: string): Promise<string[]> {
  const listing = await new Promise<string>((resolve, reject) => {
    let out = ''
    const child = spawn('cmake', ['--build', directory, '--target', 'help'], { cwd: source, stdio: ['ignore', 'pipe', 'inherit'] })
    child.stdout.on('data', (chunk: Buffer) => { out += chunk.toString() })
    child.once('error', reject)
    child.once('exit', (code) => { if (code === 0) resolve(out); else reject(new Error(`cmake --target help exited with ${String(code)}`)) })
  })
  return [...new Set(listing.match(/\bggml-cpu-[\w.-]+/g) ?? [])]
}

if (import.meta.main) console.log(await ensureLlamaServer(process.argv[2] === 'release' ? 'release' : 'native'))
