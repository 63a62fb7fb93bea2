import type { Command } from 'commander'
import { InvalidInputError } from '../../errors.ts'
import type { AppSnapshot } from '../../http/schemas/app.ts'
import type { SettingsObject } from '../../http/schemas/settings.ts'
import { describeSettings, settingFromText } from '../../settings/index.ts'
import { formatPairs, print } from '../output.ts'
import { UsageError, clientFor, withClientOptions } from './common.ts'

export function registerConfig (program: Command): void {
  const config = program.command('config').description('read and change settings')

  withClientOptions(config.command('get').argument('[key]', 'one setting; all when omitted').description('show settings'))
    .action(async (key: string | undefined, _options, command: Command) => {
      const { client, options } = clientFor(command)
      const { settings } = await client.get<AppSnapshot>('/v1/app')
      if (key != null && !(key in settings)) throw new UsageError(`Unknown setting ${key}: the settings are ${Object.keys(settings).join(', ')}`)
      const value = key == null ? settings : settings[key as keyof SettingsObject]
      print(value, options.json, () => key == null
        ? formatPairs(Object.entries(settings).map(([k, v]) => [k, k === 'cluster_passcode' && v !== '' ? '(set)' : v]))
        : String(value))
    })

  withClientOptions(config.command('set').argument('<key>', 'a setting (listed below)').argument('<value>', 'its new value')
    .description('change one setting')
    .addHelpText('after', settingsHelp))
    .action(async (key: string, raw: string, _options, command: Command) => {
      const { client, options } = clientFor(command)
      // Checked here, before the node is asked: a typo in the command line is a usage error naming the key
      const value = usageChecked(() => settingFromText(key, raw))
      const updated = await client.patch<SettingsObject>('/v1/app/settings', { [key]: value })
      print(updated, options.json, () => `${key} = ${String((updated as Record<string, unknown>)[key])}`)
    })
}

/** The settable keys, what each accepts and what it does, from the node's own settings schema. */
function settingsHelp (): string {
  const settings = describeSettings()
  const width = Math.max(...settings.map(({ key }) => key.length))
  const lines = settings.map(({ key, accepts, description }) => `  ${key.padEnd(width)}  ${accepts}\n  ${' '.repeat(width)}  ${description}`)
  return `\nSettings (key, accepted values, meaning):\n${lines.join('\n')}\n`
}

function usageChecked<T> (parse: () => T): T {
  try {
    return parse()
  } catch (err) {
    // The value (or key) as typed is wrong: exit code 2, like every other bad command line
    if (err instanceof InvalidInputError) throw new UsageError(err.message)
    throw err
  }
}
