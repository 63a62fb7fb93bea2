/** Prints rows as an aligned text table, the CLI's default output; `--json` prints the API's answer instead. */
export function formatTable (columns: string[], rows: Array<Array<string | number | null>>): string {
  const cells = rows.map((row) => row.map((cell) => cell == null ? '-' : String(cell)))
  const widths = columns.map((column, i) => Math.max(column.length, ...cells.map((row) => row[i].length)))
  const line = (values: string[]): string => values.map((value, i) => value.padEnd(widths[i])).join('  ').trimEnd()
  return [line(columns.map((c) => c.toUpperCase())), ...cells.map(line)].join('\n')
}

export function formatPairs (pairs: Array<[string, string | number | boolean | null]>): string {
  const width = Math.max(...pairs.map(([key]) => key.length))
  // A value of several lines keeps them under its first
  return pairs.map(([key, value]) => `${key.padEnd(width)}  ${value == null ? '-' : String(value).replaceAll('\n', `\n${' '.repeat(width + 2)}`)}`).join('\n')
}

export function print (value: unknown, json: boolean | undefined, human: () => string): void {
  process.stdout.write((json === true ? JSON.stringify(value, null, 2) : human()) + '\n')
}
