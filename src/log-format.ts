// How log records look: the formats `serve --log-format` offers, and the human one, made from pino's JSON records.
// No pino import here: the CLI checks its options with this file without loading the logger.

/** `json`: one JSON object per line, for machines (log shippers, journald); `pretty`: one human line per record. */
export type LogFormat = 'json' | 'pretty'
export const LOG_FORMATS: readonly LogFormat[] = ['json', 'pretty']
export const LOG_LEVELS = ['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent'] as const

/** The format `serve --log-format auto` means: pretty for a person at a terminal, JSON for everything else. */
export function autoLogFormat (stdoutIsTTY: boolean): LogFormat {
  return stdoutIsTTY ? 'pretty' : 'json'
}

/**
 * A pino destination that writes each record as one human line. Our own few lines rather than pino-pretty: it
 * would add a dozen packages and a worker thread to every install for what a terminal needs.
 */
export function prettyStream (out: NodeJS.WritableStream, options: { colors: boolean }): { write: (line: string) => void } {
  return {
    write: (line: string) => {
      for (const json of line.split('\n')) if (json !== '') out.write(formatLogLine(json, options) + '\n')
    }
  }
}

const LEVEL_NAMES: Record<number, string> = { 10: 'TRACE', 20: 'DEBUG', 30: 'INFO', 40: 'WARN', 50: 'ERROR', 60: 'FATAL' }
const LEVEL_COLORS: Record<number, string> = { 10: '90', 20: '90', 30: '32', 40: '33', 50: '31', 60: '35' }
/** Fields every record has, shown in the line's fixed part or not at all. */
const FIXED = new Set(['level', 'time', 'pid', 'hostname', 'msg', 'part', 'err', 'reqId'])

/**
 * `14:03:07.215 INFO  [models] download started modelID=hf.co/… sizeBytes=621408 req=3f2a9c1e`; an error's message
 * follows its line, and from `error` up its stack too, indented.
 */
export function formatLogLine (json: string, options: { colors: boolean }): string {
  let record: Record<string, unknown>
  try {
    record = JSON.parse(json) as Record<string, unknown>
  } catch (err) {
    if (err instanceof SyntaxError) return json // not one of pino's records: shown as it came
    throw err
  }
  const level = typeof record.level === 'number' ? record.level : 30
  const name = (LEVEL_NAMES[level] ?? String(level)).padEnd(5)
  const time = typeof record.time === 'number' ? localTime(new Date(record.time)) : ''
  const parts = [time, options.colors ? `\u001b[${LEVEL_COLORS[level] ?? '0'}m${name}\u001b[0m` : name]
  if (typeof record.part === 'string') parts.push(`[${record.part}]`)
  parts.push(String(record.msg ?? ''))
  for (const [key, value] of Object.entries(record)) {
    if (FIXED.has(key) || value === undefined) continue
    parts.push(`${key}=${formatValue(value)}`)
  }
  if (typeof record.reqId === 'string') parts.push(`req=${record.reqId.slice(0, 8)}`)
  const err = record.err as { message?: unknown, stack?: unknown } | undefined
  let text = parts.join(' ')
  if (err != null && typeof err === 'object') {
    text += ` error=${formatValue(err.message ?? '')}`
    if (level >= 50 && typeof err.stack === 'string') text += '\n' + err.stack.split('\n').slice(1).map((l) => `    ${l.trim()}`).join('\n')
  }
  return text
}

/** `14:03:07.215` in the machine's time zone: a person compares it with their clock, a machine reads the JSON format. */
function localTime (date: Date): string {
  const two = (n: number): string => String(n).padStart(2, '0')
  return `${two(date.getHours())}:${two(date.getMinutes())}:${two(date.getSeconds())}.${String(date.getMilliseconds()).padStart(3, '0')}`
}

function formatValue (value: unknown): string {
  if (typeof value === 'string') return /^[^\s"=]+$/.test(value) ? value : JSON.stringify(value)
  return JSON.stringify(value)
}
