import { Option, type Command } from 'commander'
import { ApiKeyScope, type ApiKeyList, type GeneratedApiKey, type RevokedApiKey } from '../../http/schemas/apikeys.ts'
import { formatTable, print } from '../output.ts'
import { clientFor, withClientOptions } from './common.ts'

export function registerApiKeys (program: Command): void {
  const apikeys = program.command('apikeys').description('manage API keys')

  withClientOptions(apikeys.command('list').description('list API keys (never the full key)'))
    .action(async (_options, command: Command) => {
      const { client, options } = clientFor(command)
      const list = await client.get<ApiKeyList>('/v1/app/apikeys')
      print(list, options.json, () => list.keys.length === 0
        ? 'No API keys. Create one with: meshnode apikeys generate NAME'
        : formatTable(['id', 'name', 'prefix', 'scope', 'status', 'created', 'last used'],
          list.keys.map((k) => [k.id, k.name, k.prefix, k.scope, k.status, k.created, k.lastUsed])))
    })

  withClientOptions(apikeys.command('generate').argument('<name>').description('create a key; the full key is shown once')
    .addOption(new Option('--scope <scope>', 'admin: every route; inference: the OpenAI-compatible endpoints only').choices(ApiKeyScope.options).default('admin')))
    .action(async (name: string, _options, command: Command) => {
      const { client, options } = clientFor(command)
      const scope = command.opts<{ scope: ApiKeyScope }>().scope
      const key = await client.post<GeneratedApiKey>('/v1/app/apikeys', { name, scope })
      print(key, options.json, () => `${key.key}\n\nKey "${key.name}" (${key.id}, scope ${key.scope}) created. Store it now: it is not shown again.`)
    })

  withClientOptions(apikeys.command('revoke').argument('<id>').description('revoke a key at once'))
    .action(async (id: string, _options, command: Command) => {
      const { client, options } = clientFor(command)
      const result = await client.post<RevokedApiKey>('/v1/app/apikeys/revoke', { id })
      print(result, options.json, () => `Revoked ${result.id}`)
    })
}
