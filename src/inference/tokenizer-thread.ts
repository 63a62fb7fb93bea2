// The tokenizer thread's own side: it runs in a worker thread (see prompt-tokens.ts) and tokenizes, with a
// vocabulary-only copy of a model, texts too large to tokenize on the node's event loop. llama.cpp's tokenizers cost
// far more than linear on some text (a long run of characters outside the vocabulary, which each become byte tokens):
// a megabyte of emoji takes tens of seconds, during which a thread does nothing else.
import { parentPort } from 'node:worker_threads'
import type { LlamaModel, LlamaTextJSON } from 'node-llama-cpp'
import { getSharedLlama, llamaModule } from './llama.ts'

/** What the node asks of the thread. `text` is plain text, or a rendered chat (`LlamaText.toJSON()`). */
export interface TokenizeJob {
  id: number
  path: string
  text: string | LlamaTextJSON
  /** node-llama-cpp's `trimLeadingSpace` option of `LlamaModel.tokenize` (plain text only). */
  trimLeadingSpace: boolean
}

export type TokenizeAnswer = { id: number, tokens: Uint32Array } | { id: number, error: string }

/** Vocabularies this thread keeps open, by model path (the node's loaded models, and the one before a swap). */
const KEPT_VOCABULARIES = 2
const vocabularies = new Map<string, Promise<LlamaModel>>()

async function vocabulary (path: string): Promise<LlamaModel> {
  let model = vocabularies.get(path)
  if (model == null) {
    model = getSharedLlama(1).then(async (llama) => await llama.loadModel({ modelPath: path, vocabOnly: true }))
    vocabularies.set(path, model)
    model.catch(() => { vocabularies.delete(path) })
    for (const [oldPath, old] of vocabularies) {
      if (vocabularies.size <= KEPT_VOCABULARIES) break
      vocabularies.delete(oldPath)
      void old.then(async (loaded) => { await loaded.dispose() }, () => undefined)
    }
  }
  return await model
}

async function tokenize (job: TokenizeJob): Promise<Uint32Array> {
  const model = await vocabulary(job.path)
  if (typeof job.text === 'string') return Uint32Array.from(model.tokenize(job.text, false, job.trimLeadingSpace ? 'trimLeadingSpace' : undefined))
  const { LlamaText } = await llamaModule()
  return Uint32Array.from(LlamaText.fromJSON(job.text).tokenize(model.tokenizer))
}

const port = parentPort
if (port != null) {
  port.on('message', (job: TokenizeJob) => {
    tokenize(job).then(
      (tokens) => { port.postMessage({ id: job.id, tokens } satisfies TokenizeAnswer, [tokens.buffer as ArrayBuffer]) },
      (err: unknown) => { port.postMessage({ id: job.id, error: err instanceof Error ? err.message : String(err) } satisfies TokenizeAnswer) }
    )
  })
}
