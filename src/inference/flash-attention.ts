// Flash attention: the choice a user makes (`serve --flash-attention`) and what it means where a model runs.

/**
 * Flash attention, as llama-server's `-fa` and node-llama-cpp's `flashAttention` take it: `on`, `off`, or `auto`
 * (llama-server's default, and ours), which lets llama.cpp use it wherever the backend supports it, except on the CPU
 * (`resolveFlashAttention`).
 */
export type FlashAttention = 'auto' | 'on' | 'off'
export const FLASH_ATTENTION_CHOICES: readonly FlashAttention[] = ['auto', 'on', 'off']
/** A FlashAttention choice as node-llama-cpp takes it (`flashAttention`, `defaultContextFlashAttention`). */
export function llamaFlashAttention (choice: FlashAttention): 'auto' | boolean {
  return choice === 'auto' ? 'auto' : choice === 'on'
}
/**
 * What `choice` means for a model that runs on the CPU (`onCpu`) or not. On the CPU `auto` is off: there llama.cpp's
 * flash attention kernel (in node-llama-cpp's prebuilt CPU libraries) makes every decoded token dearer the deeper it
 * is in the context, for every head size measured (48 to 128): 7,400 tokens in, a token takes 2–6× as long with it,
 * 20,400 tokens in (135M shape) 5×; a turn's 107 new tokens take as long or longer (0.73× without it at 20,400), and
 * only a long prompt evaluated from nothing gains (1.2–1.35× as long without it). An agent's prefix is evaluated once
 * and then kept (prefix states), while every answer is decoded deep in the context (bench/README.md). A GPU keeps
 * llama.cpp's own choice.
 */
export function resolveFlashAttention (choice: FlashAttention, onCpu: boolean): 'auto' | boolean {
  if (choice === 'auto' && onCpu) return false
  return llamaFlashAttention(choice)
}
