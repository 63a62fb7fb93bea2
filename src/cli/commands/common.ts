import type { Command } from 'commander'
import { ApiClient, type ClientOptions } from '../client.ts'

/**
 * The command line itself is wrong (an option out of range, a missing argument): exit code 2, as commander's own
 * usage errors. The node or the network refusing or failing is exit code 1 (README, "Exit codes").
 */
export class UsageError extends Error {
  override name = 'UsageError'
}

/** Adds the options every client command takes (CONTRACT §10) and returns the command for chaining. */
export function withClientOptions (command: Command): Command {
  return command
    .option('--port <port>', 'port of the local node (default 11435)', portOption('--port'))
    .option('--url <url>', 'base URL of the node, with or without /v1 (overrides --port)')
    .option('--api-key <key>', 'API key (default: $MESHNODE_API_KEY, else the local admin-token)')
    .option('--data-dir <dir>', 'data dir of the local node, to find its admin-token (default $MESHNODE_DATA_DIR or ~/.meshnode)')
    .option('--json', 'print the API answer as JSON')
}

export function clientFor (command: Command): { client: ApiClient, options: ClientOptions } {
  const options = command.optsWithGlobals<ClientOptions>()
  return { client: new ApiClient(options), options }
}

/** A whole number from `min` to `max`, or a UsageError naming the option. */
export function wholeNumber (option: string, value: string, min: number, max: number): number {
  const number = Number(value)
  if (!/^\d+$/.test(value) || number < min || number > max) {
    throw new UsageError(`${option} must be a whole number from ${min} to ${max}, not ${value}`)
  }
  return number
}

/** A number from `min` to `max` (decimals allowed), or a UsageError naming the option. */
export function decimalNumber (option: string, value: string, min: number, max: number): number {
  const number = Number(value)
  if (value.trim() === '' || !Number.isFinite(number) || number < min || number > max) {
    throw new UsageError(`${option} must be a number from ${min} to ${max}, not ${value}`)
  }
  return number
}

/** Commander argument parsers for the checks above, so a bad value stops the command before it does anything. */
export function wholeNumberOption (option: string, min: number, max: number): (value: string) => number {
  return (value) => wholeNumber(option, value, min, max)
}

export function decimalNumberOption (option: string, min: number, max: number): (value: string) => number {
  return (value) => decimalNumber(option, value, min, max)
}

export function portOption (option: string): (value: string) => string {
  return (value) => String(wholeNumber(option, value, 0, 65535))
}
