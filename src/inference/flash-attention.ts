// Flash attention: the choice a user makes (`serve --flash-attention`) and what it means for one model.

/**
 * Flash attention, as llama-server's `-fa` and node-llama-cpp's `flashAttention` take it: `on`, `off`, or `auto`
 * (llama-server's default, and ours), which lets llama.cpp use it wherever the backend supports it, except on the CPU
 * for a model whose attention heads are narrower than FLASH_ATTENTION_HEAD_STEP (`resolveFlashAttention`).
 */
export type FlashAttention = 'auto' | 'on' | 'off'
export const FLASH_ATTENTION_CHOICES: readonly FlashAttention[] = ['auto', 'on', 'off']
/** A FlashAttention choice as node-llama-cpp takes it (`flashAttention`, `defaultContextFlashAttention`). */
export function llamaFlashAttention (choice: FlashAttention): 'auto' | boolean {
  return choice === 'auto' ? 'auto' : choice === 'on'
}
/**
 * On the CPU, llama.cpp's flash attention takes a head's dot products FLASH_ATTENTION_HEAD_STEP values at a time (its
 * AVX-512 f16 step) and what is left one value at a time, which node-llama-cpp's prebuilt CPU libraries run slowly:
 * deep in a context a token takes much longer with it for heads narrower than the step, and heads that leave a
 * remainder lose overall, while for 64 and 128 it is faster throughout (bench/README.md). So on the CPU `auto` leaves
 * it off for heads narrower than the step. (llama-server built from the same source with a newer compiler pays nothing
 * for it.)
 */
export const FLASH_ATTENTION_HEAD_STEP = 64
/** What `choice` means for one model: `headSize` from its GGUF (null if it does not say), `onCpu` where it runs. */
export function resolveFlashAttention (choice: FlashAttention, headSize: number | null, onCpu: boolean): 'auto' | boolean {
  if (choice === 'auto' && onCpu && headSize != null && headSize < FLASH_ATTENTION_HEAD_STEP) return false
  return llamaFlashAttention(choice)
}
