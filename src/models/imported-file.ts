// A GGUF file the user already has, checked before it is registered in place (POST /v1/app/models/import): where it
// is, that it is a GGUF, and the id it is listed under when the user names none.
import { open, stat } from 'node:fs/promises'
import { basename, isAbsolute, resolve } from 'node:path'
import { InvalidInputError, NotFoundError } from '../errors.ts'
import { findCatalogEntry } from './catalog.ts'

const GGUF_MAGIC = 'GGUF'
/** The longest plain id we derive from a file name (model-id.ts allows 128 characters for a plain name). */
const MAX_DERIVED_ID_LENGTH = 120

export interface ImportedFile {
  /** Absolute and normalised. */
  path: string
  sizeBytes: number
}

/**
 * Checks that `path` is an absolute path to a readable GGUF file: NotFoundError when nothing is there, InvalidInputError
 * (on `path`) for a relative path, a directory or other special file, an unreadable file or one that is not GGUF.
 */
export async function inspectImportedFile (path: string): Promise<ImportedFile> {
  if (path.includes('\0')) throw new InvalidInputError('path must not contain a NUL character', 'path')
  if (!isAbsolute(path)) throw new InvalidInputError(`path must be absolute, not ${JSON.stringify(path)} (the CLI resolves a relative one)`, 'path')
  const absolute = resolve(path)
  let size: number
  try {
    const info = await stat(absolute)
    if (!info.isFile()) throw new InvalidInputError(`${absolute} is not a file`, 'path')
    size = info.size
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code
    if (code === 'ENOENT' || code === 'ENOTDIR') throw new NotFoundError(`No file at ${absolute}`)
    if (code === 'EACCES') throw new InvalidInputError(`${absolute} cannot be read by the node (permission denied)`, 'path')
    throw err
  }
  let magic: string
  try {
    const file = await open(absolute, 'r')
    try {
      const { buffer, bytesRead } = await file.read(Buffer.alloc(4), 0, 4, 0)
      magic = buffer.subarray(0, bytesRead).toString('latin1')
    } finally {
      await file.close()
    }
  } catch (err) {
    // Permission, or a file that stat calls regular and no read can serve (/proc/self/mem answers EIO): either way
    // the user named a path the node cannot use
    const code = (err as NodeJS.ErrnoException).code
    throw new InvalidInputError(`${absolute} cannot be read by the node (${code === 'EACCES' ? 'permission denied' : code ?? String(err)})`, 'path')
  }
  if (magic !== GGUF_MAGIC) throw new InvalidInputError(`${absolute} is not a GGUF file (it does not start with "GGUF")`, 'path')
  return { path: absolute, sizeBytes: size }
}

/**
 * The id an imported file is listed under when the user names none: its file name without `.gguf`, lowercased, with
 * anything a plain model id cannot hold turned into `-`; `-local` is appended when that is a catalog model's id.
 */
export function importedModelID (path: string): string {
  const base = basename(path).replace(/\.gguf$/i, '').toLowerCase()
  let id = base.replace(/[^a-z0-9._:+-]+/g, '-').replace(/^[^a-z0-9]+/, '').slice(0, MAX_DERIVED_ID_LENGTH)
  if (id === '') id = 'imported'
  return findCatalogEntry(id) == null ? id : `${id}-local`
}
