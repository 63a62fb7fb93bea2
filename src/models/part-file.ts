// A download's `.part` file: what an earlier attempt left (its size and hash, to resume from), and the commit of a
// complete one into place so that a crash leaves either the .part or the whole file, never a torn file under the name.
import { createHash } from 'node:crypto'
import type { Hash } from 'node:crypto'
import { createReadStream } from 'node:fs'
import { open, rename, stat } from 'node:fs/promises'
import { dirname } from 'node:path'

/** What a .part holds: its bytes' running sha256, and how many. */
export interface Part { hash: Hash, receivedBytes: number }

/** The size and hash of a .part left by an earlier call, or an empty one. */
export async function readPart (partPath: string, signal: AbortSignal | undefined): Promise<Part> {
  const hash = createHash('sha256')
  try {
    await stat(partPath)
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return { hash, receivedBytes: 0 } // nothing to resume
    throw err
  }
  let receivedBytes = 0
  for await (const chunk of createReadStream(partPath, { signal })) {
    hash.update(chunk as Buffer)
    receivedBytes += (chunk as Buffer).length
  }
  return { hash, receivedBytes }
}

/** Makes a verified .part durable and renames it to `destination`, the rename itself made durable too. */
export async function commitPart (partPath: string, destination: string): Promise<void> {
  const file = await open(partPath, 'r+')
  try {
    await file.sync() // the bytes reach the disk before the name says the file is complete
  } finally {
    await file.close()
  }
  await rename(partPath, destination)
  if (process.platform !== 'win32') await syncDirectory(dirname(destination)) // and the rename itself survives a crash
}

async function syncDirectory (dir: string): Promise<void> {
  const handle = await open(dir, 'r')
  try {
    await handle.sync()
  } finally {
    await handle.close()
  }
}
