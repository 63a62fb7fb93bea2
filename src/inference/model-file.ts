// What a GGUF file says before it is loaded (its size, the width of its attention heads, whether it is an embedding
// model), node-llama-cpp's estimate of the memory the model and its context take (GgufInsights), and what memory the
// machine has for it.
import { readFileSync } from 'node:fs'
import { stat } from 'node:fs/promises'
import { freemem } from 'node:os'
import type { GgufFileInfo, Llama } from 'node-llama-cpp'
import { ModelLoadError } from './errors.ts'
import { llamaModule } from './llama.ts'

/** What a model is for: `chat` (chat and text completions, and embeddings too), or `embedding` (embeddings only). */
export type ModelKind = 'chat' | 'embedding'

/**
 * Architectures llama.cpp runs as encoders only: they pool their tokens into one vector and generate nothing.
 * A GGUF of any other architecture is an embedding model when it names a pooling (`<arch>.pooling_type` mean, cls,
 * last or rank), as llama.cpp's converter writes for embedding models built on a decoder (Qwen3-Embedding).
 */
const ENCODER_ARCHITECTURES: ReadonlySet<string> = new Set(['bert', 'nomic-bert', 'nomic-bert-moe', 'jina-bert-v2', 'jina-bert-v3', 'modern-bert', 'neo-bert', 't5encoder'])
/** GGUF `pooling_type` values that pool: mean (1), cls (2), last (3), rank (4); none is 0, unspecified -1. */
const POOLING_TYPES: ReadonlySet<number> = new Set([1, 2, 3, 4])

export interface ModelFile {
  sizeBytes: number
  kind: ModelKind
  /** The context the model was trained with (`<arch>.context_length`), 0 when the GGUF does not say. */
  trainContextLength: number
  info: GgufFileInfo
}

/** Reads the file's metadata and tensor list (never its weights). A missing file or one that is not GGUF: ModelLoadError. */
export async function inspectModelFile (modelID: string, path: string): Promise<ModelFile> {
  let sizeBytes: number
  try {
    sizeBytes = (await stat(path)).size
  } catch (err) {
    // ENOENT or EACCES: say which file, instead of node-llama-cpp's less direct failure later
    throw new ModelLoadError(modelID, `cannot read ${path} (${errorMessage(err)})`, { cause: err })
  }
  let info: GgufFileInfo
  try {
    // 'filesystem' so a path that looks like a URL is never fetched; the tensor list is what the estimate reads
    const { readGgufFileInfo } = await llamaModule()
    info = await readGgufFileInfo(path, { sourceType: 'filesystem', readTensorInfo: true, logWarnings: false })
  } catch (err) {
    // a wrong magic, an unsupported GGUF version or a truncated header
    throw new ModelLoadError(modelID, `${path} is not a GGUF file (${errorMessage(err)})`, { cause: err })
  }
  const architecture = info.architectureMetadata as {
    context_length?: number
    pooling_type?: number
  } | undefined
  const name = String(info.metadata.general?.architecture ?? '')
  const pooling = architecture?.pooling_type
  const kind: ModelKind = ENCODER_ARCHITECTURES.has(name) || (typeof pooling === 'number' && POOLING_TYPES.has(pooling)) ? 'embedding' : 'chat'
  const trainContextLength = typeof architecture?.context_length === 'number' ? architecture.context_length : 0
  return { sizeBytes, kind, trainContextLength, info }
}

/** The context a model gets: the engine's size, unless the model was trained with fewer tokens. */
export function contextLengthFor (trainContextLength: number, contextSize: number): number {
  return trainContextLength > 0 ? Math.min(contextSize, trainContextLength) : contextSize
}

/**
 * node-llama-cpp's estimate of the memory (RAM and VRAM together) the model takes with the context it gets here:
 * `sequences` slots of `contextLength` tokens for a chat model, one embedding context for an embedding model.
 */
export async function estimateMemoryBytes (file: ModelFile, llama: Llama, options: { contextLength: number, sequences: number, gpuLayers: number }): Promise<number> {
  const { GgufInsights } = await llamaModule()
  const insights = await GgufInsights.from(file.info, llama)
  const model = await insights.estimateModelResourceRequirementsV2({ gpuLayers: options.gpuLayers })
  const embedding = file.kind === 'embedding'
  const context = await insights.estimateContextResourceRequirementsV2({
    contextSize: options.contextLength,
    modelGpuLayers: options.gpuLayers,
    sequences: embedding ? 1 : options.sequences,
    isEmbeddingContext: embedding
  })
  return model.cpuRam + model.gpuVram + context.cpuRam + context.gpuVram
}

/** What this machine can give models without swapping: Linux's MemAvailable (else free memory), plus free VRAM. */
export async function availableMemoryBytes (llama: Llama): Promise<number> {
  let ram = freemem()
  try {
    const kB = /^MemAvailable:\s+(\d+) kB$/m.exec(readFileSync('/proc/meminfo', 'utf8'))?.[1]
    if (kB != null) ram = Number(kB) * 1024
  } catch {
    // not Linux: free memory is the nearest figure
  }
  return ram + (llama.gpu === false ? 0 : (await llama.getVramState()).free)
}

export function errorMessage (err: unknown): string {
  return err instanceof Error ? err.message : String(err)
}
