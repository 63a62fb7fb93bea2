// Builds llama-server once, from the very llama.cpp source node-llama-cpp ships (its `llama/gitRelease.bundle`), into
// a cache directory outside the repository, for bench:llama-server only: tests and CI never build anything. The build
// runs at the lowest priority on two jobs because the machine it runs on is usually shared.
import { spawn } from 'node:child_process'
import { existsSync } from 'node:fs'
import { copyFile, cp, mkdir, readdir, readFile, rm, symlink, writeFile } from 'node:fs/promises'
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
 * the target comparison. `release`: as llama.cpp's release binaries and node-llama-cpp's prebuilt ones are
 * built (`GGML_NATIVE=OFF`, every x86/ARM CPU variant as a loadable backend, the best one picked at start), so both
 * engines run kernels from the same source (compiled by this machine's compiler, not node-llama-cpp's).
 * `prebuilt`: the release build's llama-server with node-llama-cpp's own prebuilt ggml libraries (base and every CPU
 * variant) in place of its own, so that both engines run the very same machine code and what differs is only how they
 * are driven. Start it with LD_LIBRARY_PATH set to its directory (its RUNPATH names the release build's).
 */
export type LlamaServerBuild = 'native' | 'release' | 'prebuilt'
export const LLAMA_SERVER_BUILDS: readonly LlamaServerBuild[] = ['native', 'release', 'prebuilt']

/** The path of a llama-server built from node-llama-cpp's bundled llama.cpp; builds it first if absent (~15-30 min). */
export async function ensureLlamaServer (kind: LlamaServerBuild = 'native'): Promise<string> {
  if (kind === 'prebuilt') return await withPrebuiltKernels(await ensureLlamaServer('release'))
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

/** node-llama-cpp's prebuilt binaries for this platform (the ones it loads here: no local build is ever made). */
const PREBUILT = join(import.meta.dirname, '..', 'node_modules', '@node-llama-cpp', `${process.platform}-${process.arch}`, 'bins',
  `${process.platform}-${process.arch}`)

/**
 * A copy of the release build's bin directory whose ggml base and CPU variants are node-llama-cpp's prebuilt files. The
 * base keeps the release build's file name (`libggml-base.so.0.*`) so that llama-server and the CPU variant (which asks
 * for `libggml-base.so`, the prebuilt file's soname) share one copy; two would abort at load.
 */
async function withPrebuiltKernels (releaseBinary: string): Promise<string> {
  const releaseBin = join(releaseBinary, '..')
  const bin = join(BENCH_CACHE, 'llama.cpp', 'build-prebuilt', 'bin')
  const binary = join(bin, 'llama-server')
  // node-llama-cpp's build metadata, copied along: a copy made from another version of its binaries is made again
  const metadata = '_nlcBuildMetadata.json'
  const current = await readFile(join(PREBUILT, metadata), 'utf8').catch(() => null)
  if (existsSync(binary) && current != null && current === await readFile(join(bin, metadata), 'utf8').catch(() => null)) return binary
  const prebuilt = await readdir(PREBUILT).catch(() => { throw new Error(`node-llama-cpp's prebuilt binaries are not at ${PREBUILT}`) })
  const variants = prebuilt.filter((file) => /^libggml-cpu-.*\.so$/.test(file))
  if (!prebuilt.includes('libggml-base.so') || variants.length === 0) throw new Error(`${PREBUILT} has no libggml-base.so or CPU variants`)
  await rm(join(bin, '..'), { recursive: true, force: true })
  await mkdir(bin, { recursive: true })
  const release = await readdir(releaseBin)
  for (const file of release) if (file !== 'llama-server' && !/^libggml-(base|cpu-).*\.so/.test(file)) await cp(join(releaseBin, file), join(bin, file), { verbatimSymlinks: true })
  const base = release.find((file) => /^libggml-base\.so\.\d+\.\d+\.\d+$/.test(file))
  if (base == null) throw new Error(`${releaseBin} has no versioned libggml-base.so`)
  await copyFile(join(PREBUILT, 'libggml-base.so'), join(bin, base))
  const soname = base.replace(/\.\d+\.\d+$/, '')
  await symlink(base, join(bin, soname))
  await symlink(soname, join(bin, 'libggml-base.so'))
  for (const file of variants) await copyFile(join(PREBUILT, file), join(bin, file))
  if (current != null) await writeFile(join(bin, metadata), current)
  // The binary last: its presence marks a complete directory.
  await copyFile(releaseBinary, binary)
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

if (import.meta.main) {
  const kind = (process.argv[2] ?? 'native') as LlamaServerBuild
  if (!LLAMA_SERVER_BUILDS.includes(kind)) throw new Error(`the build must be one of ${LLAMA_SERVER_BUILDS.join(', ')}, not ${kind}`)
  console.log(await ensureLlamaServer(kind))
}
