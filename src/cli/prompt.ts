// Questions the CLI asks a person at a terminal (a key's scope, a large download). Without a terminal nobody can
// answer: callers check `inTerminal()` first and then need a flag instead.
import { createInterface } from 'node:readline/promises'

/** Whether a person can answer: stdin is a terminal. */
export function inTerminal (): boolean {
  return process.stdin.isTTY === true
}

/** Asks `question` on stderr (stdout stays the command's answer, for --json) and returns the line typed, trimmed. */
export async function promptLine (question: string): Promise<string> {
  const lines = createInterface({ input: process.stdin, output: process.stderr, terminal: true })
  try {
    return (await lines.question(question)).trim()
  } finally {
    lines.close()
  }
}
