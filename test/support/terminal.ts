// Runs the real `meshnode` command in a pseudo-terminal, for what the CLI does only when a person can answer (a
// question on the terminal). util-linux `script` provides the terminal; where it is missing, the tests say so and skip.
import { spawn, spawnSync } from 'node:child_process'
import { CLI } from './node.ts'

/** Whether `script` (util-linux) is here to give the command a terminal. */
export const HAS_TERMINAL = process.platform === 'linux' && spawnSync('script', ['--version']).status === 0

export interface TerminalResult {
  /** stdout and stderr together, as the terminal showed them (with the typed input echoed). */
  output: string
  code: number | null
}

/** `meshnode <args>` with a terminal as stdin, stdout and stderr; `input` is typed into it. */
export async function runCliInTerminal (args: string[], options: { input?: string, env?: Record<string, string> } = {}): Promise<TerminalResult> {
  const command = [process.execPath, CLI, ...args].map(quote).join(' ')
  const child = spawn('script', ['--quiet', '--return', '--command', command, '/dev/null'], { env: { ...process.env, MESHNODE_API_KEY: '', ...options.env } })
  let output = ''
  child.stdout.on('data', (chunk: Buffer) => { output += chunk.toString() })
  child.stderr.on('data', (chunk: Buffer) => { output += chunk.toString() })
  child.stdin.end(options.input ?? '')
  const code = await new Promise<number | null>((resolve) => child.once('close', resolve))
  return { output, code }
}

function quote (arg: string): string {
  return `'${arg.replaceAll('\'', '\'\\\'\'')}'`
}
