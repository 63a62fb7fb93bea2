// One node per data dir: a lock file holding the PID of the node that owns the directory, taken before anything in it
// is read or written (the database, the identity, the admin token), so that a second start on the same directory
// fails at once instead of overwriting the running node's admin token and joining the network under its identity.
import { closeSync, openSync, readFileSync, rmSync, writeSync } from 'node:fs'
import { join } from 'node:path'
import { ConflictError } from '../errors.ts'

export const DATA_DIR_LOCK_FILE = 'meshnode.lock'

/** Another running process holds the data dir. */
export class DataDirInUseError extends ConflictError {
  override name = 'DataDirInUseError'
  readonly pid: number
  constructor (dataDir: string, pid: number) {
    super(`The data dir ${dataDir} is in use by a running node (PID ${pid}). Stop it first, or start this one with another --data-dir.`)
    this.pid = pid
  }
}

/**
 * Takes the data dir's lock for this process and returns its release. A lock left by a process that is gone (a
 * crash, a kill -9) or that cannot be read is taken over; one held by a live process refuses with DataDirInUseError.
 */
export function lockDataDir (dataDir: string): () => void {
  const path = join(dataDir, DATA_DIR_LOCK_FILE)
  for (let attempt = 0; attempt < 2; attempt++) {
    let fd: number
    try {
      fd = openSync(path, 'wx', 0o600)
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err
      const holder = lockHolder(path)
      if (holder != null) throw new DataDirInUseError(dataDir, holder)
      rmSync(path, { force: true }) // stale: its process is gone
      continue
    }
    try {
      writeSync(fd, `${process.pid}\n`)
    } finally {
      closeSync(fd)
    }
    let released = false
    return () => {
      if (released) return
      released = true
      if (lockHolder(path) === process.pid) rmSync(path, { force: true })
    }
  }
  throw new DataDirInUseError(dataDir, lockHolder(path) ?? 0) // another start took it between our two attempts
}

/** The live process that holds the lock at `path`, or null when it is gone, unreadable or not a PID. */
function lockHolder (path: string): number | null {
  let pid: number
  try {
    pid = Number(readFileSync(path, 'utf8').trim())
  } catch {
    return null
  }
  if (!Number.isSafeInteger(pid) || pid <= 0) return null
  if (pid === process.pid) return pid
  try {
    process.kill(pid, 0) // no signal: only whether it exists
    return pid
  } catch (err) {
    // EPERM: it exists, under another user
    return (err as NodeJS.ErrnoException).code === 'EPERM' ? pid : null
  }
}
