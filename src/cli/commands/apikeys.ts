import { Option, type Command } from 'commander'
import { ApiKeyScope, type ApiKeyList, type GeneratedApiKey, type RevokedApiKey } from '../../http/schemas/apikeys.ts'
import { formatTable, print } from '../output.ts'
import { inTerminal, promptLine } from '../prompt.ts'
import { UsageError, clientFor, withClientOptions } from './common.ts'

/** The scopes as the terminal question offers them: inference first, since keys are mostly given to apps. */
const SCOPE_CHOICES: ReadonlyArray<{ scope: ApiKeyScope, what: string }> = [
  { scope: 'inference', what: 'the OpenAI-compatible endpoints only, for an app' },
  { scope: 'admin', what: 'every route: settings, keys, wallet' }
]

export function registerApiKeys (program: Command): void {
  const apikeys = program.command('apikeys').description('manage API keys')

  withClientOptions(apikeys.command('list').description('list API keys (never the full key) and the scope of each'))
    .action(async (_options, command: Command) => {
      const { client, options } = clientFor(command)
      const list = await client.get<ApiKeyList>('/v1/app/apikeys')
      print(list, options.json, () => list.keys.length === 0
        ? 'No API keys. Create one with: meshnode apikeys generate NAME'
        : formatTable(['id', 'name', 'prefix', 'scope', 'status', 'created', 'last used'],
          list.keys.map((k) => [k.id, k.name, k.prefix, k.scope, k.status, k.created, k.lastUsed])))
    })

  withClientOptions(apikeys.command('generate').argument('<name>')
    .description('create a key; the full key is shown once. Without --scope, a terminal asks for it; elsewhere the key is admin')
    .addOption(new Option('--scope <scope>', 'inference: the OpenAI-compatible endpoints only; admin: every route').choices(ApiKeyScope.options)))
    .action(async (name: string, _options, command: Command) => {
      const { client, options } = clientFor(command)
      const scope = command.opts<{ scope?: ApiKeyScope }>().scope ?? (inTerminal() ? await askScope() : undefined)
      // Without a scope the node gives its default (admin), as the API does for a request without one
      const key = await client.post<GeneratedApiKey>('/v1/app/apikeys', { name, ...(scope == null ? {} : { scope }) })
      if (scope == null) process.stderr.write(`No --scope given: the key has the ${key.scope} scope. A key for an app should be --scope inference.\n`)
      print(key, options.json, () => `${key.key}\n\nKey "${key.name}" (${key.id}, scope ${key.scope}) created. Store it now: it is not shown again.`)
    })

  withClientOptions(apikeys.command('revoke').argument('<id>').description('revoke a key at once'))
    .action(async (id: string, _options, command: Command) => {
      const { client, options } = clientFor(command)
      const result = await client.post<RevokedApiKey>('/v1/app/apikeys/revoke', { id })
      print(result, options.json, () => `Revoked ${result.id}`)
    })
}

/** The scope a person picks at the terminal: a number or a name; Enter takes the first (inference). */
async function askScope (): Promise<ApiKeyScope> {
  const menu = SCOPE_CHOICES.map(({ scope, what }, i) => `  ${i + 1}) ${scope}: ${what}`).join('\n')
  const answer = (await promptLine(`Scope of the key:\n${menu}\nChoose 1 or 2 [1]: `)).toLowerCase()
  const chosen = answer === '' ? SCOPE_CHOICES[0] : SCOPE_CHOICES.find(({ scope }, i) => answer === String(i + 1) || answer === scope)
  if (chosen == null) throw new UsageError(`the scope must be 1 (inference) or 2 (admin), not ${answer}`)
  return chosen.scope
}
