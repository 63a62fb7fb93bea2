import { Command } from 'commander'
import { VERSION } from '../config.ts'
import { ApiError } from './client.ts'
import { registerApiKeys } from './commands/apikeys.ts'
import { registerChat } from './commands/chat.ts'
import { registerConfig } from './commands/config.ts'
import { registerPeers } from './commands/peers.ts'
import { registerPtn } from './commands/ptn.ts'
import { registerRelay } from './commands/relay.ts'
import { registerServe } from './commands/serve.ts'
import { registerModels } from './commands/models.ts'
import { registerStatus } from './commands/status.ts'
import { registerWallet } from './commands/wallet.ts'
import { registerAgent } from './commands/agent.ts'
import { registerDashboard } from './commands/dashboard.ts'

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
  registerRelay(program)
  registerPeers(program)
  registerWallet(program)
  registerModels(program)
  registerPtn(program)
  registerAgent(program)
  registerDashboard(program)
  return program
}

/** Runs the command line; a failure prints one line to stderr and sets a non-zero exit code. */
export async function run (argv: string[]): Promise<void> {
  try {
    await buildProgram().parseAsync(argv)
  } catch (err) {
    const message = err instanceof ApiError ? `${err.message}${err.status > 0 ? ` (HTTP ${err.status})` : ''}` : (err as Error).message
    process.stderr.write(`meshnode: ${message}\n`)
    process.exitCode = 1
  }
}
