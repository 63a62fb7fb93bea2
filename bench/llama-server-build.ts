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

/** The path of a llama-server built from node-llama-cpp's bundled llama.cpp; builds it first if absent (~15-30 min). */
export async function ensureLlamaServer (): Promise<string> {
  const source = join(BENCH_CACHE, 'llama.cpp')
  const build = join(source, 'build')
  const binary = join(build, 'bin', 'llama-server')
  if (existsSync(binary)) return binary
  await mkdir(BENCH_CACHE, { recursive: true })
  if (!existsSync(join(source, 'CMakeLists.txt'))) {
    await rm(source, { recursive: true, force: true })
    await run('git', ['clone', '--quiet', BUNDLE, source], BENCH_CACHE)
  }
  await run('nice', ['-n', '19', 'cmake', '-S', '.', '-B', 'build', '-DCMAKE_BUILD_TYPE=Release', '-DLLAMA_CURL=OFF',
    '-DGGML_NATIVE=ON', '-DLLAMA_BUILD_TESTS=OFF', '-DLLAMA_BUILD_EXAMPLES=OFF'], source)
  await run('nice', ['-n', '19', 'cmake', '--build', 'build', '--config', 'Release', '--target', 'llama-server', '-j', '2'], source)
  if (!existsSync(binary)) throw new Error(`the build finished without ${binary}`)
  return binary
}

if (import.meta.main) console.log(await ensureLlamaServer())
