// Runs the real `meshnode` command as a separate process, as a user would, and collects what it printed.
import { spawn } from 'node:child_process'
import { CLI } from './node.ts'

export interface CliResult {
  stdout: string
  stderr: string
  code: number | null
}

/**
 * `meshnode <args>`, with `input` on stdin when given, run in `cwd` (default this process's), with `env` added to the
 * environment. MESHNODE_API_KEY is cleared so a key in the developer's environment cannot change what a test sees.
 */
export async function runCli (args: string[], options: { input?: string, cwd?: string, env?: Record<string, string> } = {}): Promise<CliResult> {
  const child = spawn(process.execPath, [CLI, ...args], { env: { ...process.env, MESHNODE_API_KEY: '', ...options.env }, cwd: options.cwd })
  let stdout = ''
  let stderr = ''
  child.stdout.on('data', (chunk: Buffer) => { stdout += chunk.toString() })
  child.stderr.on('data', (chunk: Buffer) => { stderr += chunk.toString() })
  child.stdin.end(options.input ?? '')
  const code = await new Promise<number | null>((resolve) => child.once('close', resolve))
  return { stdout, stderr, code }
}
