// Following a model download from the CLI (`meshnode models download`, `meshnode run`): the node downloads, and the
// command shows its events as a progress bar on stderr.
import { Presets, SingleBar } from 'cli-progress'
import type { ModelRecord } from '../http/schemas/app.ts'
import type { DownloadStarted, ModelEventData, ModelList } from '../http/schemas/models.ts'
import { formatBytes, sameModel } from '../models/index.ts'
import type { ApiClient } from './client.ts'
import { readSse } from './sse.ts'

/**
 * Starts (or joins) a download and follows its events to the end. Subscribes before asking, so no event is missed.
 * The download runs in the node: Ctrl-C only stops watching, and running the command again joins it; if the node
 * stops, it resumes from its .part at the next start.
 */
export async function download (client: ApiClient, rawID: string, quiet: boolean): Promise<ModelRecord> {
  const watching = new AbortController()
  const events = await client.fetch('GET', '/v1/app/events', undefined, watching.signal)
  // Made at the first byte, not before: a bar for a transfer not yet under way would read 0 of ?, or 100 % of nothing
  let bar: SingleBar | null = null
  let lastNote: string | null = null
  const onInterrupt = (): void => {
    bar?.stop()
    process.stderr.write('\nStopped watching. The node keeps downloading; run the same command again to follow it.\n')
    watching.abort()
    process.exit(130)
  }
  process.once('SIGINT', onInterrupt)
  try {
    const started = await client.post<DownloadStarted>('/v1/app/models/download', { modelID: rawID })
    const modelID = started.modelID
    if (started.status === 'downloading') {
      if (!quiet) process.stderr.write(`Downloading ${modelID}\n`)
      for await (const { event, data } of sseEvents(events)) {
        const subject = (data as { modelID?: string }).modelID
        if (subject == null || !sameModel(subject, modelID)) continue
        if (event === 'download.progress' && !quiet) {
          const progress = data as ModelEventData<'download.progress'>
          if (bar == null && (progress.receivedBytes === 0 || progress.message != null)) {
            // Nothing flows yet: why we wait ("HTTP 503, resuming in 2 s") is a line of its own, once
            if (progress.message != null && progress.message !== lastNote) process.stderr.write(`  ${progress.message}\n`)
            lastNote = progress.message
            continue
          }
          const payload = {
            received: shortBytes(progress.receivedBytes),
            size: progress.totalBytes == null ? '?' : shortBytes(progress.totalBytes),
            rate: progress.bytesPerSecond == null ? '-' : `${shortBytes(progress.bytesPerSecond)}/s`,
            // Why nothing flows ("rate limited, resuming in 55 s"), else the time left
            status: progress.message ?? `ETA ${progress.etaSeconds == null ? '-' : `${Math.ceil(progress.etaSeconds)}s`}`
          }
          if (bar == null) {
            bar = newBar(progress.totalBytes != null)
            bar.start(progress.totalBytes ?? progress.receivedBytes, progress.receivedBytes, payload)
          } else {
            if (progress.totalBytes != null) bar.setTotal(progress.totalBytes)
            bar.update(progress.receivedBytes, payload)
          }
        } else if (event === 'download.completed') {
          break
        } else if (event === 'download.failed') {
          const error = (data as ModelEventData<'download.failed'>).error
          // The node's reason may name the download already ("Download of <url> failed: …"): say it once
          throw new Error(error.startsWith('Download of ') ? error : `Download of ${modelID} failed: ${error}`)
        }
      }
      bar?.stop()
      bar = null
    }
    const list = await client.get<ModelList>('/v1/app/models')
    const record = list.models.find((m) => sameModel(m.modelID, modelID))
    if (record == null || (record.status !== 'downloaded' && record.status !== 'loaded')) {
      // The stream ended without a verdict: the node stopped, and will resume the download when it starts again
      throw new Error(`Lost the node while downloading ${modelID}; it resumes when the node starts again. Run this command again to follow it.`)
    }
    return record
  } finally {
    bar?.stop()
    process.off('SIGINT', onInterrupt)
    watching.abort()
  }
}

/** The bar of a transfer under way; without a known size it shows bytes and rate only, never a percentage. */
function newBar (sized: boolean): SingleBar {
  return new SingleBar({
    format: sized ? '{bar} {percentage}% | {received} of {size} | {rate} | {status}' : '{received} | {rate} | {status}',
    hideCursor: true,
    stream: process.stderr
  }, Presets.shades_classic)
}

/** The node's events, parsed; ends quietly when the node goes away mid-stream (the caller reports what that means). */
async function * sseEvents (response: Response): AsyncGenerator<{ event: string, data: unknown }> {
  try {
    for await (const { event, data } of readSse(response)) yield { event, data: JSON.parse(data) as unknown }
  } catch (err) {
    // The node went away mid-stream (it is shutting down)
    if ((err as Error).name === 'TypeError' || (err as NodeJS.ErrnoException).code === 'ECONNRESET') return
    throw err
  }
}

/** `621.4 kB`: the unit part of formatBytes, for tables and the progress bar. */
export function shortBytes (bytes: number): string {
  return formatBytes(Math.round(bytes)).replace(/ \(\d+ bytes\)$/, '')
}
