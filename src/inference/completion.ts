import type { Token } from 'node-llama-cpp'
import type { CompletionEvent, CompletionRequest } from './chat.ts'
import { ContextOverflowError, InvalidGenerationRequestError } from './errors.ts'
import { llamaModule } from './llama.ts'
import { planSampling } from './sampling.ts'
import { beginningToken, doneEvent, metered, type ModelParts, type SlotWork } from './slot-work.ts'
import { canLoop, planLoop, runOnSlot } from './token-loop.ts'

/**
 * Plans a text completion: the model continues the prompt as raw text, no chat template. With a `suffix`, it fills
 * in the middle, in the model's own infill format; a model without infill tokens cannot, and the request is refused
 * rather than answered as a plain continuation that ignores the suffix.
 */
export async function planCompletion (parts: ModelParts, request: CompletionRequest, signal?: AbortSignal): Promise<SlotWork<CompletionEvent>> {
  const { model, modelID, contextLength } = parts
  if (typeof request.prompt !== 'string') throw new InvalidGenerationRequestError('prompt must be a string', 'prompt')
  const suffix = request.suffix ?? null
  if (suffix != null && typeof suffix !== 'string') throw new InvalidGenerationRequestError('suffix must be a string', 'suffix')
  const infill = suffix != null && suffix !== '' // OpenAI reads an empty suffix as none
  const { prefix: prefixToken, suffix: suffixToken, middle: middleToken } = model.tokens.infill
  if (infill && (prefixToken == null || suffixToken == null)) {
    throw new InvalidGenerationRequestError(`Model ${modelID} has no fill-in-the-middle tokens, so it cannot complete between a prompt and a suffix`, 'suffix')
  }
  // The input exactly as LlamaCompletion builds it (what a slot's cache is matched against, and what is counted):
  // the beginning token, then the text; for infill, its markers around prefix and suffix. It is given no room to
  // shift the context, so this is exactly what the model reads.
  const bos = beginningToken(model)
  // The prompt and the suffix share one request's bound
  parts.prompt.checkBytes(Buffer.byteLength(request.prompt) + (infill ? Buffer.byteLength(suffix) : 0), 'prompt', infill ? 'The prompt and suffix hold' : 'The prompt holds')
  const prompt = await parts.prompt.tokenize(request.prompt, 'prompt', { trimLeadingSpace: bos != null || infill, signal })
  let tokens: Token[]
  if (infill) {
    const after = await parts.prompt.tokenize(suffix, 'suffix', { trimLeadingSpace: true, signal })
    const body = middleToken == null
      ? [suffixToken as Token, ...after, prefixToken as Token, ...prompt]
      : [prefixToken as Token, ...prompt, suffixToken as Token, ...after, middleToken]
    tokens = [...(bos == null ? [] : [bos]), ...body]
  } else {
    tokens = [...(bos == null ? [] : [bos]), ...prompt]
  }
  const promptTokens = tokens.length
  if (promptTokens === 0) throw new InvalidGenerationRequestError('prompt must not be empty', 'prompt')
  const room = contextLength - promptTokens
  if (room < 2) {
    throw new ContextOverflowError(`The prompt takes ${promptTokens} tokens; model ${modelID} has room for ${contextLength - 2} per request`, 'prompt', { promptTokens, roomTokens: contextLength - 2 })
  }
  const { maxTokens, sampling } = await planSampling(request, model, room)
  const { LlamaCompletion } = await llamaModule()
  // A plain continuation stops only at end-of-generation tokens and the caller's strings: our own token loop runs it
  // (token-loop.ts). Infill, and Gemma's completions, also stop at tokens of the model's own that LlamaCompletion knows.
  const architecture = String(model.fileInfo.metadata.general.architecture)
  const loop = await planLoop(!infill && architecture !== 'gemma' && architecture !== 'gemma2', { tokens, sampling, maxTokens, stopTriggers: [] })
  return {
    tokens,
    async run (slot, emit, signal) {
      if (loop != null && canLoop(slot.sequence)) return await runOnSlot(slot, loop, emit, signal)
      const completion = new LlamaCompletion({ contextSequence: slot.sequence })
      const options = {
        ...sampling,
        maxTokens,
        onTextChunk: (text: string) => { if (text !== '') emit({ type: 'delta', text }) },
        signal,
        stopOnAbortSignal: true,
        // A prompt that does not fit was refused above; shifting would silently drop its beginning.
        disableContextShift: true
      }
      try {
        const { result, completionTokens } = await metered(slot, async () => infill
          ? await completion.generateInfillCompletionWithMeta(request.prompt, suffix, options)
          : await completion.generateCompletionWithMeta(request.prompt, options))
        const trigger = result.metadata.stopReason === 'customStopTrigger' ? result.metadata.customStopTrigger : undefined
        return doneEvent(result.metadata.stopReason, promptTokens, completionTokens, signal, trigger)
      } finally {
        completion.dispose({ disposeSequence: false })
      }
    }
  }
}
