import { resolve } from 'node:path'
import type { Command } from 'commander'
import { Presets, SingleBar } from 'cli-progress'
import type { ModelRecord } from '../../http/schemas/app.ts'
import type { DownloadStarted, ModelEventData, ModelList, ModelLoaded, ModelUnloaded } from '../../http/schemas/models.ts'
import { formatBytes, sameModel } from '../../models/index.ts'
import type { ApiClient } from '../client.ts'
import { formatTable, print } from '../output.ts'
import { readSse } from '../sse.ts'
import { clientFor, withClientOptions } from './common.ts'

export function registerModels (program: Command): void {
  const models = program.command('models').description('list, download, load and unload models')

  withClientOptions(models.command('list').description('the catalog and the models this node has or is fetching'))
    .action(async (_options, command: Command) => {
      const { client, options } = clientFor(command)
      const list = await client.get<ModelList>('/v1/app/models')
      print(list, options.json, () => formatTable(['id', 'name', 'params', 'quant', 'size', 'status'],
        list.models.map((m) => [m.modelID, m.name, m.parameters, m.quantization, m.sizeBytes == null ? null : shortBytes(m.sizeBytes), status(m)])))
    })

  withClientOptions(models.command('download')
    .argument('<modelID>', 'a catalog id, hf.co/<org>/<repo>/<file>.gguf or hf.co/<org>/<repo>:<QUANT>')
    .description('download a model, showing progress; Ctrl-C stops watching, the node keeps downloading'))
    .action(async (modelID: string, _options, command: Command) => {
      const { client, options } = clientFor(command)
      const record = await download(client, modelID, options.json === true)
      print(record, options.json, () => `Downloaded ${record.modelID} (${shortBytes(record.sizeBytes ?? 0)}). Load it with: meshnode models load ${record.modelID}`)
    })

  withClientOptions(models.command('import')
    .argument('<path>', 'a GGUF file on this machine; it stays where it is')
    .option('--id <modelID>', 'the id to list it under (default: its file name)')
    .description('register a GGUF file you already have: never copied, never evicted, outside max_storage_gb'))
    .action(async (path: string, _options, command: Command) => {
      const { client, options } = clientFor(command)
      const id = command.opts<{ id?: string }>().id
      const record = await client.post<ModelRecord>('/v1/app/models/import', { path: resolve(path), ...(id == null ? {} : { modelID: id }) })
      print(record, options.json, () => `Imported ${record.modelID} from ${record.source.replace(/^file:/, '')} (${shortBytes(record.sizeBytes ?? 0)}). Load it with: meshnode models load ${record.modelID}`)
    })

  withClientOptions(models.command('load').argument('<modelID>').description('load a downloaded model, replacing the loaded one'))
    .action(async (modelID: string, _options, command: Command) => {
      const { client, options } = clientFor(command)
      const loaded = await client.post<ModelLoaded>('/v1/app/models/load', { modelID })
      print(loaded, options.json, () => `Loaded ${loaded.modelID} (context ${loaded.contextLength} tokens)`)
    })

  withClientOptions(models.command('unload').description('unload the loaded model and free its memory'))
    .action(async (_options, command: Command) => {
      const { client, options } = clientFor(command)
      const unloaded = await client.post<ModelUnloaded>('/v1/app/models/unload')
      print(unloaded, options.json, () => unloaded.modelID == null ? 'No model was loaded' : `Unloaded ${unloaded.modelID}`)
    })
}

/**
 * Starts (or joins) a download and follows its events to the end. Subscribes before asking, so no event is missed.
 * The download runs in the node: Ctrl-C only stops watching, and running the command again joins it; if the node
 * stops, it resumes from its .part at the next start.
 */
async function download (client: ApiClient, rawID: string, quiet: boolean): Promise<ModelRecord> {
  const watching = new AbortController()
  const events = await client.fetch('GET', '/v1/app/events', undefined, watching.signal)
  const bar = new SingleBar({
    format: '{bar} {percentage}% | {received} of {size} | {rate} | ETA {etaText}',
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
            etaText: progress.etaSeconds == null ? '-' : `${Math.ceil(progress.etaSeconds)}s`
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

function status (model: ModelRecord): string {
  if (model.status === 'downloading' && model.progress?.fraction != null) return `downloading ${Math.floor(model.progress.fraction * 100)}%`
  if (model.status === 'failed') return `failed: ${model.error ?? ''}`
  return model.status
}

/** `621.4 kB`: the unit part of formatBytes, for tables and the progress bar. */
function shortBytes (bytes: number): string {
  return formatBytes(Math.round(bytes)).replace(/ \(\d+ bytes\)$/, '')
}
