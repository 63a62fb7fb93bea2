import { Command, CommanderError } from 'commander'
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
import { registerRun } from './commands/run.ts'
import { registerGpu } from './commands/gpu.ts'
import { registerStatus } from './commands/status.ts'
import { registerWallet } from './commands/wallet.ts'
import { registerAgent } from './commands/agent.ts'
import { registerDashboard } from './commands/dashboard.ts'
import { UsageError } from './commands/common.ts'

export function buildProgram (): Command {
  const program = new Command('meshnode')
    .description('A node of a peer-to-peer LLM inference network')
    .version(VERSION)
    .showHelpAfterError()
    // Commander's usage errors are thrown to run(), which gives them exit code 2 like our own (UsageError)
    .exitOverride()
  registerServe(program)
  registerStatus(program)
  registerConfig(program)
  registerApiKeys(program)
  registerRun(program)
  registerChat(program)
  registerRelay(program)
  registerPeers(program)
  registerWallet(program)
  registerModels(program)
  registerGpu(program)
  registerPtn(program)
  registerAgent(program)
  registerDashboard(program)
  return program
}

/** Exit codes (README, "Exit codes"): what went wrong, not which command. */
export const EXIT_OK = 0
/** The node or the network refused or failed: an error answer, no node at the address, a failed download. */
export const EXIT_FAILED = 1
/** The command line is wrong: unknown command or option, a missing argument, a value out of range. */
export const EXIT_USAGE = 2

/** Runs the command line; a failure prints one line to stderr and sets the exit code. */
export async function run (argv: string[]): Promise<void> {
  try {
    await buildProgram().parseAsync(argv)
  } catch (err) {
    if (err instanceof CommanderError) {
      // Commander printed its message (or the help or version asked for) already
      process.exitCode = err.exitCode === 0 ? EXIT_OK : EXIT_USAGE
      return
    }
    const message = err instanceof ApiError ? `${err.message}${err.status > 0 ? ` (HTTP ${err.status})` : ''}` : (err as Error).message
    process.stderr.write(`meshnode: ${message}\n`)
    process.exitCode = err instanceof UsageError ? EXIT_USAGE : EXIT_FAILED
  }
}
