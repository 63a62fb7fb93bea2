import type { Command } from 'commander'
import type { AppSnapshot } from '../../http/schemas/app.ts'
import type { SettingsObject } from '../../http/schemas/settings.ts'
import { formatPairs, print } from '../output.ts'
import { UsageError, clientFor, withClientOptions } from './common.ts'

export function registerConfig (program: Command): void {
  const config = program.command('config').description('read and change settings')

  withClientOptions(config.command('get').argument('[key]', 'one setting; all when omitted').description('show settings'))
    .action(async (key: string | undefined, _options, command: Command) => {
      const { client, options } = clientFor(command)
      const { settings } = await client.get<AppSnapshot>('/v1/app')
      if (key != null && !(key in settings)) throw new Error(`Unknown setting: ${key}`)
      const value = key == null ? settings : settings[key as keyof SettingsObject]
      print(value, options.json, () => key == null
        ? formatPairs(Object.entries(settings).map(([k, v]) => [k, k === 'cluster_passcode' && v !== '' ? '(set)' : v]))
        : String(value))
    })

  withClientOptions(config.command('set').argument('<key>').argument('<value>').description('change one setting'))
    .action(async (key: string, raw: string, _options, command: Command) => {
      const { client, options } = clientFor(command)
      const { settings } = await client.get<AppSnapshot>('/v1/app')
      const current = (settings as Record<string, unknown>)[key]
      // The setting's present type says how to read the text: "1234" is a passcode string, "0.5" a number.
      const value = typeof current === 'boolean' ? parseBoolean(raw) : typeof current === 'number' ? parseNumber(key, raw) : raw
      const updated = await client.patch<SettingsObject>('/v1/app/settings', { [key]: value })
      print(updated, options.json, () => `${key} = ${String((updated as Record<string, unknown>)[key])}`)
    })
}

function parseBoolean (raw: string): boolean | string {
  if (/^(true|on|yes|1)$/i.test(raw)) return true
  if (/^(false|off|no|0)$/i.test(raw)) return false
  return raw // the node refuses it with a message naming the setting
}

/** A number setting's value; its range is the node's to judge (a 400 naming the setting). */
function parseNumber (key: string, raw: string): number {
  const value = Number(raw)
  if (raw.trim() === '' || !Number.isFinite(value)) throw new UsageError(`${key} needs a number, not ${raw}`)
  return value
}
