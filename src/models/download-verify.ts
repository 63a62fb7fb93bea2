// What a download checks of the file: the sha256 and size the caller or the hub announce, compared before any
// bandwidth is spent where they already tell the file cannot be right, and the bytes received compared with them
// before the .part is renamed into place.
import { commitPart } from './part-file.ts'
import { DownloadTooLargeError, IntegrityError } from './errors.ts'
import { discardPart, type DownloadResult, type Job } from './download-job.ts'

export const SHA256_HEX = /^[0-9a-f]{64}$/

/** What the hub says the file is (X-Linked-*): the LFS object's sha256 and size. */
export interface Linked { sha256: string | null, sizeBytes: number | null }

/** Verifies the .part, makes it durable, and renames it into place. */
export async function finish (job: Job, destination: string): Promise<DownloadResult> {
  job.onVerifying?.()
  const { receivedBytes } = job.part
  const sha256 = job.part.hash.digest('hex')
  if (job.expectedSize != null && receivedBytes !== job.expectedSize) {
    await discardPart(job)
    throw new IntegrityError(destination, 'size', String(job.expectedSize), String(receivedBytes))
  }
  if (job.expectedSha256 != null && sha256 !== job.expectedSha256) {
    await discardPart(job)
    throw new IntegrityError(destination, 'sha256', job.expectedSha256, sha256)
  }
  await commitPart(job.partPath, destination)
  job.progress.finish(receivedBytes)
  return { path: destination, sha256, sizeBytes: receivedBytes }
}

/** Adopts or checks what the server says of the file (the hub's X-Linked-* describe the LFS object, the CDN's
 * headers do not), and refuses one that cannot be right before spending bandwidth on it. */
export async function checkAnnounced (job: Job, announced: Linked, response: Response): Promise<void> {
  const fail = async (err: Error): Promise<never> => {
    await response.body?.cancel()
    await discardPart(job)
    throw err
  }
  if (announced.sha256 != null) {
    job.expectedSha256 ??= announced.sha256
    if (job.expectedSha256 !== announced.sha256) {
      await fail(new IntegrityError(job.url, 'sha256', job.expectedSha256, `${announced.sha256} (announced by the server)`))
    }
  }
  if (announced.sizeBytes != null && job.expectedSize != null && announced.sizeBytes !== job.expectedSize) {
    await fail(new IntegrityError(job.url, 'size', String(job.expectedSize), `${announced.sizeBytes} (announced by the server)`))
  }
  await checkDeclaredSize(job, announced.sizeBytes, response)
}

/** Refuses a file larger than the budget before spending bandwidth on it. */
export async function checkDeclaredSize (job: Job, sizeBytes: number | null, response?: Response): Promise<void> {
  const size = Math.max(sizeBytes ?? 0, job.part.receivedBytes)
  if (job.maxBytes == null || size <= job.maxBytes) return
  await response?.body?.cancel()
  await discardPart(job)
  throw new DownloadTooLargeError(job.url, size, job.maxBytes, 'declared')
}

export function readLinked (headers: Headers): Linked {
  // The hub quotes the etag; only a sha256 (an LFS object) identifies the bytes, a git blob id does not
  const etag = headers.get('x-linked-etag')?.replace(/^W\//, '').replaceAll('"', '').toLowerCase() ?? null
  const size = headers.get('x-linked-size')
  return {
    sha256: etag != null && SHA256_HEX.test(etag) ? etag : null,
    sizeBytes: size != null && /^\d+$/.test(size) ? Number(size) : null
  }
}
