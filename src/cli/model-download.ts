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
  const bar = new SingleBar({
    format: '{bar} {percentage}% | {received} of {size} | {rate} | {status}',
    hideCursor: true,
    stream: process.stderr
  }, Presets.shades_classic)
  let barStarted = false
  const onInterrupt = (): void => {
    if (barStarted) bar.stop()
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
          const total = progress.totalBytes ?? progress.receivedBytes
          const payload = {
            received: shortBytes(progress.receivedBytes),
            size: progress.totalBytes == null ? '?' : shortBytes(progress.totalBytes),
            rate: progress.bytesPerSecond == null ? '-' : `${shortBytes(progress.bytesPerSecond)}/s`,
            // Why nothing flows ("rate limited, resuming in 55 s"), else the time left
            status: progress.message ?? `ETA ${progress.etaSeconds == null ? '-' : `${Math.ceil(progress.etaSeconds)}s`}`
          }
          if (!barStarted) {
            bar.start(total, progress.receivedBytes, payload)
            barStarted = true
          } else {
            bar.setTotal(total)
            bar.update(progress.receivedBytes, payload)
          }
        } else if (event === 'download.completed') {
          break
        } else if (event === 'download.failed') {
          throw new Error(`Download of ${modelID} failed: ${(data as ModelEventData<'download.failed'>).error}`)
        }
      }
      if (barStarted) bar.stop()
      barStarted = false
    }
    const list = await client.get<ModelList>('/v1/app/models')
    const record = list.models.find((m) => sameModel(m.modelID, modelID))
    if (record == null || (record.status !== 'downloaded' && record.status !== 'loaded')) {
      // The stream ended without a verdict: the node stopped, and will resume the download when it starts again
      throw new Error(`Lost the node while downloading ${modelID}; it resumes when the node starts again. Run this command again to follow it.`)
    }
    return record
  } finally {
    if (barStarted) bar.stop()
    process.off('SIGINT', onInterrupt)
    watching.abort()
  }
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
