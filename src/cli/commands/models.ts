import { resolve } from 'node:path'
import type { Command } from 'commander'
import type { ModelRecord } from '../../http/schemas/app.ts'
import type { AliasList, ModelAlias, ModelList, ModelLoaded, ModelUnloaded } from '../../http/schemas/models.ts'
import { download, shortBytes } from '../model-download.ts'
import { formatTable, print } from '../output.ts'
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

  withClientOptions(models.command('load').argument('<modelID>').description('load a downloaded model beside those loaded (it stays until unloaded, and is loaded again at the next start)'))
    .action(async (modelID: string, _options, command: Command) => {
      const { client, options } = clientFor(command)
      const loaded = await client.post<ModelLoaded>('/v1/app/models/load', { modelID })
      print(loaded, options.json, () => `Loaded ${loaded.modelID} (context ${loaded.contextLength} tokens)`)
    })

  withClientOptions(models.command('alias')
    .argument('<alias>', 'the name a client sends (e.g. the model Claude Code or Codex asks for)')
    .argument('<modelID>', 'a model this node or a peer serves')
    .description('let requests that name <alias> be answered by <modelID>; `models aliases` lists them'))
    .action(async (alias: string, modelID: string, _options, command: Command) => {
      const { client, options } = clientFor(command)
      const made = await client.post<ModelAlias>('/v1/app/models/alias', { alias, modelID })
      print(made, options.json, () => `Requests for ${made.alias} are answered by ${made.modelID}`)
    })

  withClientOptions(models.command('unalias').argument('<alias>').description('remove an alias'))
    .action(async (alias: string, _options, command: Command) => {
      const { client, options } = clientFor(command)
      const removed = await client.request<ModelAlias>('DELETE', `/v1/app/models/aliases/${encodeURIComponent(alias)}`)
      print(removed, options.json, () => `Removed the alias ${removed.alias} (of ${removed.modelID})`)
    })

  withClientOptions(models.command('aliases').description('the names that stand for models'))
    .action(async (_options, command: Command) => {
      const { client, options } = clientFor(command)
      const list = await client.get<AliasList>('/v1/app/models/aliases')
      print(list, options.json, () => list.aliases.length === 0 ? 'No aliases. Make one with: meshnode models alias <alias> <modelID>' : formatTable(['alias', 'model'], list.aliases.map((a) => [a.alias, a.modelID])))
    })

  withClientOptions(models.command('unload').argument('[modelID]').description('unload a model and free its memory; every loaded model when none is named'))
    .action(async (modelID: string | undefined, _options, command: Command) => {
      const { client, options } = clientFor(command)
      const unloaded = await client.post<ModelUnloaded>('/v1/app/models/unload', modelID == null ? undefined : { modelID })
      print(unloaded, options.json, () => unloaded.unloaded.length === 0 ? (modelID == null ? 'No model was loaded' : `${modelID} was not loaded`) : `Unloaded ${unloaded.unloaded.join(', ')}`)
    })
}

function status (model: ModelRecord): string {
  if (model.status === 'downloading' && model.progress?.fraction != null) return `downloading ${Math.floor(model.progress.fraction * 100)}%`
  if (model.status === 'failed') return `failed: ${model.error ?? ''}`
  if (model.loaded != null) return `loaded: ${describeLoaded(model.loaded)}`
  return model.status
}

/** A loaded model in a few words: what it does now, its memory, and how it came (and will go). */
export function describeLoaded (loaded: NonNullable<ModelRecord['loaded']>): string {
  const work = loaded.kind === 'embedding'
    ? `embeddings${loaded.queued > 0 ? `, ${loaded.queued} queued` : ''}`
    : `${loaded.busySlots}/${loaded.slots} slots busy${loaded.queued > 0 ? `, ${loaded.queued} queued` : ''}`
  const how = loaded.loadedBy === 'explicit' ? 'stays' : `idle ${loaded.idleSeconds}s`
  return `${work}, ${shortBytes(loaded.memoryBytes)}, ${how}`
}
