import { closeSync, fsyncSync, openSync, renameSync, writeSync } from 'node:fs'
import { dirname } from 'node:path'

/**
 * Writes a small file so that a crash at any moment leaves either the old content or the new, never a torn file:
 * write a temp file, fsync it, rename over the target, fsync the directory.
 */
export function writeFileAtomic (path: string, content: string | Uint8Array, mode = 0o600): void {
  const temp = `${path}.${process.pid}.tmp`
  const fd = openSync(temp, 'w', mode)
  try {
    writeSync(fd, typeof content === 'string' ? Buffer.from(content) : content)
    fsyncSync(fd)
  } finally {
    closeSync(fd)
  }
  renameSync(temp, path)
  const dir = openSync(dirname(path), 'r')
  try {
    fsyncSync(dir)
  } finally {
    closeSync(dir)
  }
}
