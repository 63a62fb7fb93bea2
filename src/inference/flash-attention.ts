// Flash attention: the choice a user makes (`serve --flash-attention`) and what it means where a model runs.

/**
 * Flash attention, as llama-server's `-fa` and node-llama-cpp's `flashAttention` take it: `on`, `off`, or `auto`
 * (llama-server's default, and ours), which lets llama.cpp use it wherever the backend supports it, except for generation
 * on the CPU (`resolveFlashAttention`).
 */
export type FlashAttention = 'auto' | 'on' | 'off'
export const FLASH_ATTENTION_CHOICES: readonly FlashAttention[] = ['auto', 'on', 'off']
/** A FlashAttention choice as node-llama-cpp takes it (`flashAttention`, `defaultContextFlashAttention`). */
export function llamaFlashAttention (choice: FlashAttention): 'auto' | boolean {
  return choice === 'auto' ? 'auto' : choice === 'on'
}
/**
 * What `choice` means for a generation context, on the CPU (`onCpu`) or not; embedding contexts, which only evaluate
 * prompts, take the choice as it is (`llamaFlashAttention`). On the CPU `auto` is off for generation: there llama.cpp's
 * flash attention kernel (in node-llama-cpp's prebuilt CPU libraries) makes every decoded token dearer the deeper it
 * is in the context, for every head size measured (48 to 128): 7,400 tokens in, a token takes 2–5× as long with it,
 * 20,400 tokens in (135M shape) 5×; a turn's 107 new tokens take about as long either way, and only a prompt evaluated
 * from nothing gains (1.1–1.35× as long without it). An agent's prefix is evaluated once and then kept (prefix
 * states), while every answer is decoded deep in the context (bench/README.md, `npm run bench:flash-attention`). A GPU
 * keeps llama.cpp's own choice.
 */
export function resolveFlashAttention (choice: FlashAttention, onCpu: boolean): 'auto' | boolean {
  if (choice === 'auto' && onCpu) return false
  return llamaFlashAttention(choice)
}
