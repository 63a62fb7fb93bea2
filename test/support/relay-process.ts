// `meshnode relay` as a user runs it: a child process on a free port with its own data dir, ready once it logs that it
// listens; killed when the test ends if it is still running.
import { spawn } from 'node:child_process'
import type { TestContext } from 'node:test'
import { CLI, exitOf, waitFor } from './node.ts'

export interface RelayProcess {
  peerId: string
  url: string
  /** SIGTERM, then its exit. */
  stop: () => Promise<{ code: number | null, signal: NodeJS.Signals | null }>
}

export async function startRelayProcess (t: TestContext, dataDir: string): Promise<RelayProcess> {
  const child = spawn(process.execPath, [CLI, 'relay', '--port', '0', '--data-dir', dataDir], { env: { ...process.env, MESHNODE_LOG_LEVEL: 'info' }, stdio: ['ignore', 'pipe', 'pipe'] })
  t.after(() => { if (child.exitCode == null && child.signalCode == null) child.kill('SIGKILL') })
  let out = ''
  child.stdout.on('data', (chunk: Buffer) => { out += chunk.toString() })
  child.stderr.on('data', (chunk: Buffer) => { out += chunk.toString() })
  const ready = await waitFor(() => {
    if (child.exitCode != null) throw new Error(`relay exited with ${child.exitCode}: ${out}`)
    const line = out.split('\n').find(l => l.includes('relay listening'))
    return line == null ? undefined : JSON.parse(line) as { peerId: string, url: string }
  }, { timeoutMs: 60_000, what: 'the relay to listen' })
  return {
    ...ready,
    stop: async () => {
      child.kill('SIGTERM')
      return await exitOf(child)
    }
  }
}
