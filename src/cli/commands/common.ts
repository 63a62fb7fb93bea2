import type { Command } from 'commander'
import { ApiClient, type ClientOptions } from '../client.ts'

/** Adds the options every client command takes (CONTRACT §10) and returns the command for chaining. */
export function withClientOptions (command: Command): Command {
  return command
    .option('--port <port>', 'port of the local node', undefined)
    .option('--url <url>', 'base URL of the node (overrides --port)')
    .option('--api-key <key>', 'API key (default: $MESHNODE_API_KEY, else the local admin-token)')
    .option('--data-dir <dir>', 'data dir of the local node, to find its admin-token')
    .option('--json', 'print the API answer as JSON')
}

export function clientFor (command: Command): { client: ApiClient, options: ClientOptions } {
  const options = command.optsWithGlobals<ClientOptions>()
  return { client: new ApiClient(options), options }
}
