import { Command } from 'commander'
import { VERSION } from '../config.ts'
import { ApiError } from './client.ts'
import { registerApiKeys } from './commands/apikeys.ts'
import { registerChat } from './commands/chat.ts'
import { registerConfig } from './commands/config.ts'
import { registerServe } from './commands/serve.ts'
import { registerStatus } from './commands/status.ts'

export function buildProgram (): Command {
  const program = new Command('meshnode')
    .description('A node of a peer-to-peer LLM inference network')
    .version(VERSION)
    .showHelpAfterError()
  registerServe(program)
  registerStatus(program)
  registerConfig(program)
  registerApiKeys(program)
  registerChat(program)
  return program
}

try {
  await buildProgram().parseAsync(process.argv)
} catch (err) {
  const message = err instanceof ApiError ? `${err.message}${err.status > 0 ? ` (HTTP ${err.status})` : ''}` : (err as Error).message
  process.stderr.write(`meshnode: ${message}\n`)
  process.exitCode = 1
}
