import type { Command } from 'commander'
import { LOG_FORMATS, LOG_LEVELS, autoLogFormat, type LogFormat } from '../../log-format.ts'
import { ApiClient, type ClientOptions } from '../client.ts'

/**
 * The command line itself is wrong (an option out of range, a missing argument): exit code 2, as commander's own
 * usage errors. The node or the network refusing or failing is exit code 1 (README, "Exit codes").
 */
export class UsageError extends Error {
  override name = 'UsageError'
}

/** Adds the options every client command takes and returns the command for chaining. */
export function withClientOptions (command: Command): Command {
  return command
    .option('--port <port>', 'port of the local node (default 11435)', portOption('--port'))
    .option('--url <url>', 'base URL of the node, with or without /v1 (overrides --port)')
    .option('--api-key <key>', 'API key (default: $MESHNODE_API_KEY, else the local admin-token, which only a node on this machine is sent)')
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

/** `--log-format` and `--log-level`, for the commands that run a server (serve, relay). */
export function withLogOptions (command: Command): Command {
  return command
    .option('--log-format <format>', 'auto (human lines on a terminal, else JSON), json or pretty', 'auto')
    .option('--log-level <level>', `${LOG_LEVELS.join(', ')} (default $MESHNODE_LOG_LEVEL, else info)`)
}

/** The log settings of a command built with withLogOptions. */
export function logSettings (options: { logFormat: string, logLevel?: string }): { logFormat: LogFormat, logLevel: string } {
  const format = options.logFormat
  if (format !== 'auto' && !(LOG_FORMATS as readonly string[]).includes(format)) {
    throw new UsageError(`--log-format must be auto, ${LOG_FORMATS.join(' or ')}, not ${format}`)
  }
  const level = options.logLevel ?? (process.env.MESHNODE_LOG_LEVEL === '' ? undefined : process.env.MESHNODE_LOG_LEVEL) ?? 'info'
  if (!(LOG_LEVELS as readonly string[]).includes(level)) throw new UsageError(`--log-level must be one of ${LOG_LEVELS.join(', ')}, not ${level}`)
  return { logFormat: format === 'auto' ? autoLogFormat(process.stdout.isTTY === true) : format as LogFormat, logLevel: level }
}
