import { stat } from 'node:fs/promises'

/** Whether a file exists; any error but "not there" is a failure of the test's own, and is thrown. */
export async function exists (path: string): Promise<boolean> {
  try {
    await stat(path)
    return true
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return false
    throw err
  }
}
