import type { ChatHistoryItem, ChatWrapper, ChatWrapperGeneratedContextState, GbnfJsonSchema, Llama, LlamaGrammar } from 'node-llama-cpp'
import type { ChatEvent, ChatRequest, ResponseFormat } from './chat.ts'
import { ContextOverflowError, InvalidGenerationRequestError, OutputConstraintError } from './errors.ts'
import { toOutputSchema, type OutputSchema } from './grammar-schema.ts'
import { llamaModule } from './llama.ts'
import { SamplingError } from './patches/node-llama-cpp.ts'
import { planSampling } from './sampling.ts'
import { doneEvent, metered, type ModelParts, type SlotWork } from './slot-work.ts'
import { canLoop, planLoop, runOnSlot } from './token-loop.ts'
import { planTools, toChatHistory, ToolCallEvents } from './tools.ts'

/**
 * Checks a chat request against the loaded model and plans it: the history in the model's chat template, tools in
 * its function-call format, a grammar for response_format, sampling. Nothing here takes a slot.
 */
export async function planChat (parts: ModelParts, request: ChatRequest, signal?: AbortSignal): Promise<SlotWork<ChatEvent>> {
  const { history, tools, chatWrapper, rendered, tokens } = await renderChat(parts, request, signal)
  const promptTokens = tokens.length
  // LlamaChat needs one free cell beyond the prompt, and then room for at least one token to sample.
  const room = parts.contextLength - promptTokens
  if (room < 2) {
    const roomTokens = parts.contextLength - 2
    throw new ContextOverflowError(
      `The messages${tools == null ? '' : ' and tools'} take ${promptTokens} tokens; model ${parts.modelID} has room for ${roomTokens} per request`, 'messages', { promptTokens, roomTokens })
  }
  const { maxTokens, sampling } = await planSampling(request, parts.model, room)
  const { grammar, schema } = tools == null ? await grammarFor(parts.llama, request.responseFormat) : { grammar: undefined, schema: null }
  const thoughtTokens = optionalThoughtTokens(request.thoughtTokens)
  const { LlamaChat } = await llamaModule()
  // Plain text in a template without segments or prefix triggers: our own token loop runs it (token-loop.ts)
  const loop = await planLoop(tools == null && grammar == null && plainTemplate(rendered, chatWrapper),
    { tokens, sampling, maxTokens, stopTriggers: rendered.stopGenerationTriggers })
  return {
    tokens,
    async run (slot, emit, signal) {
      if (loop != null && canLoop(slot.sequence)) return await runOnSlot(slot, loop, emit, signal)
      const chat = new LlamaChat({ contextSequence: slot.sequence, chatWrapper })
      const calls = new ToolCallEvents(emit)
      // A call that breaks its tool's schema ends the generation there. node-llama-cpp catches and only logs what its
      // callbacks throw, so the break is kept here, generation is stopped through its signal, and the break is thrown
      // once generateResponse is back: the request fails as an answer breaking response_format's schema does.
      const brokenCall = new AbortController()
      let answer = ''
      try {
        const { result, completionTokens } = await metered(slot, async () => await chat.generateResponse(history, {
          ...sampling,
          maxTokens,
          onTextChunk: (text) => {
            if (text === '') return
            if (schema != null) answer += text
            emit({ type: 'delta', text })
          },
          // A reasoning model's thought comes apart from the answer (onTextChunk has the answer only)
          onResponseChunk: (chunk) => {
            // A zero budget closes a thought the template opened after its first token: no thought is wanted, none is given
            if (chunk.type === 'segment' && chunk.segmentType === 'thought' && chunk.text !== '' && thoughtTokens !== 0) emit({ type: 'reasoning', text: chunk.text })
          },
          ...(thoughtTokens == null ? {} : { budgets: { thoughtTokens } }),
          signal: tools == null ? signal : AbortSignal.any([signal, brokenCall.signal]),
          // Return what was generated instead of throwing, so an aborted generation's usage can still be recorded.
          stopOnAbortSignal: true,
          ...(tools == null
            ? { grammar }
            : {
                functions: tools.functions,
                documentFunctionParams: true,
                maxParallelFunctionCalls: tools.maxParallelFunctionCalls,
                onFunctionCallParamsChunk: (chunk) => { calls.paramsChunk(chunk) },
                onFunctionCall: (call) => {
                  if (brokenCall.signal.aborted) return
                  const broken = tools.parameters.get(call.functionName)?.violation(call.params, 'arguments')
                  if (broken != null) brokenCall.abort(new OutputConstraintError(`call of ${call.functionName}`, broken))
                  else calls.called(call.functionName)
                }
              })
        }))
        if (brokenCall.signal.aborted) throw brokenCall.signal.reason
        // A whole answer under response_format's schema is checked for what its grammar could not enforce
        if (schema != null && result.metadata.stopReason !== 'maxTokens' && result.metadata.stopReason !== 'abort') {
          const broken = schema.violation(parsedOrUndefined(answer), 'answer')
          if (broken != null) throw new OutputConstraintError('answer', broken)
        }
        const trigger = result.metadata.stopReason === 'customStopTrigger' ? result.metadata.customStopTrigger : undefined
        return doneEvent(result.metadata.stopReason, promptTokens, completionTokens, signal, trigger)
      } catch (err) {
        // node-llama-cpp throws the signal's reason when it stops before any text: the broken call, or what else stopped it
        if (brokenCall.signal.aborted) throw brokenCall.signal.reason
        throw constraintFailure(err, request, tools != null)
      } finally {
        chat.dispose({ disposeSequence: false })
      }
    }
  }
}

/**
 * The chat's prompt as the model reads it: the history in its chat template with the tools in its function-call
 * format, rendered exactly as LlamaChat renders a history it has no earlier evaluation of (the model's turn opened),
 * and its tokens. What a request is billed for as input, and what count_tokens answers.
 */
export async function renderChat (parts: ModelParts, request: ChatRequest, signal?: AbortSignal) {
  const history = toChatHistory(request.messages)
  const tools = await planTools(request, parts.chatWrapper)
  if (tools != null && request.responseFormat != null && request.responseFormat.type !== 'text') {
    throw new InvalidGenerationRequestError('response_format cannot be combined with tools unless tool_choice is none', 'responseFormat')
  }
  const chatWrapper = tools?.chatWrapper ?? parts.chatWrapper
  const rendered = chatWrapper.generateContextState({ chatHistory: withModelTurn(history), availableFunctions: tools?.functions, documentFunctionParams: true })
  const what = tools == null ? 'The messages hold' : 'The messages and tools hold'
  const tokens = await parts.prompt.tokenizeRendered(rendered.contextText, 'messages', { what, signal })
  return { history, tools, chatWrapper, rendered, tokens }
}

/**
 * Whether LlamaChat would do nothing for this rendering but generate and stop at its triggers: no text to skip at the
 * start, no prefix triggers or re-rendering, no function call engaged from the start, no segments (thoughts, comments).
 */
function plainTemplate (state: ChatWrapperGeneratedContextState, chatWrapper: ChatWrapper): boolean {
  const segments = chatWrapper.settings.segments
  return (state.ignoreStartText ?? []).length === 0 && state.functionCall?.initiallyEngaged !== true &&
    state.prefixTriggers == null && state.noPrefixTrigger == null && state.rerender == null && state.detectFunctionCalls == null &&
    segments?.thought == null && segments?.comment == null
}

/** A history ending in a user turn gets an empty model turn to answer in; one ending in a model turn is continued. */
function withModelTurn (history: ChatHistoryItem[]): ChatHistoryItem[] {
  return history.at(-1)?.type === 'model' ? history : [...history, { type: 'model', response: [] }]
}

/** response_format's grammar, and for a JSON Schema the check of what its grammar does not enforce. */
async function grammarFor (llama: Llama, format: ResponseFormat | null | undefined): Promise<{ grammar: LlamaGrammar | undefined, schema: OutputSchema | null }> {
  if (format == null || format.type === 'text') return { grammar: undefined, schema: null }
  if (format.type === 'json_object') return { grammar: await llama.getGrammarFor('json'), schema: null }
  if (format.type === 'json_schema') {
    const schema = toOutputSchema(format.schema, 'responseFormat.json_schema.schema')
    try {
      return { grammar: await llama.createGrammarForJsonSchema<GbnfJsonSchema>(schema.grammar), schema }
    } catch (err) {
      // What toOutputSchema let through and llama.cpp's grammar parser still refuses is the caller's schema too
      throw new InvalidGenerationRequestError(`response_format's schema cannot be compiled into a grammar (${err instanceof Error ? err.message : String(err)})`, 'responseFormat.json_schema.schema')
    }
  }
  throw new InvalidGenerationRequestError('responseFormat.type must be text, json_object or json_schema', 'responseFormat.type')
}

/**
 * A generation under a grammar (response_format, or tools' call format) that fails in llama.cpp's sampler or grammar
 * parser failed on what the request asked for, not on the node: no token the grammar allows was left (logit_bias
 * banned them all), or a tool's parameters compile into a grammar llama.cpp refuses. Either is the caller's 400,
 * naming the parameter; anything else passes unchanged.
 */
function constraintFailure (err: unknown, request: ChatRequest, tools: boolean): unknown {
  const grammarParse = err instanceof Error && /Failed to parse grammar/.test(err.message)
  if (!(err instanceof SamplingError) && !grammarParse) return err
  const constrainedBy = tools ? 'the tools\' call format' : 'response_format'
  if (err instanceof SamplingError && Object.keys(request.logitBias ?? {}).length > 0) {
    return new InvalidGenerationRequestError(`logit_bias bans every token ${constrainedBy} allows next`, 'logitBias')
  }
  return new InvalidGenerationRequestError(`The output cannot be constrained to ${constrainedBy}: ${err.message}`, tools ? 'tools' : 'responseFormat')
}

/** The answer's JSON; undefined when a stop string cut it short of a whole value. */
function parsedOrUndefined (text: string): unknown {
  try {
    return JSON.parse(text)
  } catch {
    return undefined
  }
}

function optionalThoughtTokens (value: unknown): number | null {
  if (value == null) return null
  if (!Number.isSafeInteger(value) || (value as number) < 0) throw new InvalidGenerationRequestError('thoughtTokens must be a whole number of tokens, 0 or more', 'thoughtTokens')
  return value as number
}
