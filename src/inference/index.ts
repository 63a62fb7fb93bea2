export { LocalEngine, DEFAULT_SLOTS, DEFAULT_QUEUE_SIZE, DEFAULT_CONTEXT_SIZE, DEFAULT_MAX_LOADED_MODELS, DEFAULT_KEEP_ALIVE_MS } from './engine.ts'
export type {
  LocalEngineDeps, LocalEngineOptions, LocalEngineEvents, LoadOptions, LoadedModelInfo, LoadedModelState, LoadReason, UnloadReason, EngineStats,
  InferenceLogger
} from './engine.ts'
export { DEFAULT_PREFIX_STATE_BUDGET_BYTES, PREFIX_STATE_MIN_TOKENS, MAX_PREFIX_STATES_PER_REQUESTER } from './prefix-states.ts'
export { keyedRequester, MAX_CACHE_KEY_CHARS } from './slot-cache.ts'
export { FLASH_ATTENTION_CHOICES, llamaFlashAttention } from './flash-attention.ts'
export type { FlashAttention } from './flash-attention.ts'
export type { ModelKind } from './model-file.ts'
export type {
  ChatEngine, ChatEvent, ChatMessage, ChatRequest, ChatUsage, CompletionEvent, CompletionRequest, DoneEvent, EmbeddingEvent,
  EmbeddingRequest, FinishReason, GenerateOptions, InferenceEvent, InferenceRequest, ResponseFormat, SamplingRequest, ToolCall,
  ToolChoice, ToolDefinition, ChatRouter, ModelListing, RoutedChatRequest, RoutedGeneration, RoutedRequest, RouteOptions, ServedBy
} from './chat.ts'
export { LocalRouter, howToGetModel } from './local-router.ts'
export type { LocalRouterDeps, LocalModel, LocalModels } from './local-router.ts'
export { aliasedRouter, aliasedTokenizer } from './aliased-router.ts'
export type { ModelAliasTable } from './aliased-router.ts'
export { QueueFullError, NoModelLoadedError, ModelLoadError, ModelTooLargeError, ModelSwappedError, InvalidGenerationRequestError, ContextOverflowError, OutputConstraintError } from './errors.ts'
export { getSharedLlama, defaultInferenceThreads } from './llama.ts'
export { MAX_STOP_STRINGS, MAX_STOP_STRING_CHARS, MAX_LOGIT_BIAS, MAX_LOGIT_BIAS_ENTRIES } from './sampling.ts'
export { MAX_EMBEDDING_INPUTS, MAX_EMBEDDING_LENGTH } from './embeddings.ts'
export { MAX_TOOLS, MAX_TOOL_NAME_CHARS, TOOL_NAME, MAX_TOOL_DESCRIPTION_CHARS, MAX_TOOL_CALL_ID_CHARS } from './tools.ts'
export {
  Accelerator, GpuSetupError, GPU_CHOICES, gpuBackendsInDir, gpuPackages, installedGpuBackends, installedGpuBytes, nodeLlamaCppVersion, planGpu, suggestedGpuBackend,
  uninstallGpuBackend
} from './gpu.ts'
export type { GpuBackend, GpuChoice, GpuPlan, GpuStatus } from './gpu.ts'
export { nodeLlamaCppPatches } from './patches/node-llama-cpp.ts'
export { v8Patches } from './patches/v8.ts'
export { warnInactivePatches } from './patches/report.ts'
export type { PatchReport, PatchLogger } from './patches/report.ts'
