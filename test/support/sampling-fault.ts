import type { TestContext } from 'node:test'
import type { LlamaContext } from 'node-llama-cpp'

/**
 * Makes llama.cpp's sampler fail once, on the `nth` token sampled from now on, exactly as the real fault does (a
 * rejected native `sampleToken`: "Failed to accept token in sampler"). The native prototype is read-only, so the fault
 * goes on the context's own native object; it is removed again in t.after.
 */
export function failSamplingOnce (t: TestContext, context: LlamaContext, nth: number): { fired: () => boolean } {
  const native = (context as unknown as { _ctx: Record<string, unknown> })._ctx
  const sampleToken = native.sampleToken as (...args: unknown[]) => Promise<unknown>
  let calls = 0
  Object.defineProperty(native, 'sampleToken', {
    configurable: true,
    writable: true,
    value (this: unknown, ...args: unknown[]): Promise<unknown> {
      if (++calls === nth) return Promise.reject(new Error('Failed to accept token in sampler: injected by the test'))
      return sampleToken.apply(this, args)
    }
  })
  t.after(() => { delete native.sampleToken })
  return { fired: () => calls >= nth }
}
