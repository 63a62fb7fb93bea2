// The environment `meshnode serve` needs before the node starts (read by glibc and libuv at start, so the launcher,
// bin/meshnode.js, sets it; bench/llama-server.ts gives node-llama-cpp driven directly the same), each entry only
// where the user did not set it.
import os from 'node:os'

/**
 * - glibc gives each thread that allocates (libuv's workers, where llama.cpp loads and runs, V8's helpers) a malloc
 *   arena of its own, and every arena keeps what was freed in it: with two, `serve` holds less memory with a model
 *   loaded and runs no slower (bench/README.md). Other C libraries ignore it.
 * - libuv's pool (4 threads by default) is where node-llama-cpp decodes and samples, one task per sequence each step.
 *   Pool threads beyond the machine's cores only contend: with four streams on 2 cores, the four threads woken for
 *   the four samples of every step take the cores from the thread about to decode, and a pool no larger than the
 *   cores decodes more tokens a second (bench/README.md). So one pool thread per core, at least 2 (so that one long
 *   decode does not hold up file and DNS work; two at once, a chat and an embedding, still can) and at most libuv's
 *   default of 4.
 * @param {NodeJS.ProcessEnv} env
 * @returns {Record<string, string>} what to add to `env`
 */
export function serveEnvironment (env) {
  const cores = typeof os.availableParallelism === 'function' ? os.availableParallelism() : os.cpus().length
  // Empty counts as unset: libuv would read it as a pool of one thread, glibc as no limit
  const unset = (/** @type {string | undefined} */ value) => value == null || value === ''
  return {
    ...(unset(env.MALLOC_ARENA_MAX) ? { MALLOC_ARENA_MAX: '2' } : {}),
    ...(unset(env.UV_THREADPOOL_SIZE) ? { UV_THREADPOOL_SIZE: String(Math.min(4, Math.max(2, cores))) } : {})
  }
}
