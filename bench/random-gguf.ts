// Random-weight llama GGUFs for the benches: per-token compute like a real small model, made here instead of
// downloaded. `135M` is SmolLM2-135M's shape (dim 576, 30 layers, 9 heads / 3 KV heads, ffn 1536, tied embeddings);
// `24M` is the shape of ../shared/models/random-llama-24M-q8_0.gguf (stories15M's: dim 288, 6 layers, 6 heads, ffn
// 768), written here with whatever trained context the bench needs (meshnode caps a context at the model's own). Q8_0
// weights; the tokenizer and chat template are copied from the 24M bench model (Llama-2's 32k vocabulary, ChatML), so
// the 135M shape has 32k rather than 49k embedding rows. Written once into the bench cache, never committed.
import { existsSync } from 'node:fs'
import { mkdir, rename, writeFile } from 'node:fs/promises'
import { dirname } from 'node:path'
import { readGgufFileInfo } from 'node-llama-cpp'
import { encodeGguf, Q8_0_BLOCK, type GgufTensor, type MetadataValue } from '../test/support/tiny-gguf.ts'

interface Shape { embedding: number, layers: number, heads: number, kvHeads: number, ffn: number, ropeBase: number, seed: number }
export const SHAPES = {
  '24M': { embedding: 288, layers: 6, heads: 6, kvHeads: 6, ffn: 768, ropeBase: 10000, seed: 24 },
  '135M': { embedding: 576, layers: 30, heads: 9, kvHeads: 3, ffn: 1536, ropeBase: 100000, seed: 135 },
  // Two shapes of one 8-layer family with wider heads, 4 query heads to a key/value head: 96 values (Phi-3's) and 128
  // (Llama 3's, Qwen3's), for what depends on a head's width (bench/flash-attention.ts).
  head96: { embedding: 768, layers: 8, heads: 8, kvHeads: 2, ffn: 2048, ropeBase: 100000, seed: 96 },
  head128: { embedding: 1024, layers: 8, heads: 8, kvHeads: 2, ffn: 2048, ropeBase: 100000, seed: 128 }
} as const satisfies Record<string, Shape>
export type ShapeName = keyof typeof SHAPES
/** f16 2^-12: uniform int8 weights of this scale have a standard deviation of about 0.018, like a fresh init. */
const Q8_SCALE_F16 = 0x0C00

/** Writes the 135M-shape model with an 8k trained context to `path` unless it is there already. */
export async function ensureRandom135M (path: string, tokenizerFrom: string): Promise<string> {
  return await ensureRandomLlama(path, tokenizerFrom, '135M', 8192)
}

/**
 * Writes a model of `shapeName` whose trained context is `contextLength` to `path` unless it is there already;
 * `tokenizerFrom` is a llama GGUF to copy the tokenizer from.
 */
export async function ensureRandomLlama (path: string, tokenizerFrom: string, shapeName: ShapeName, contextLength: number): Promise<string> {
  if (existsSync(path)) return path
  const shape: Shape = SHAPES[shapeName]
  const info = await readGgufFileInfo(tokenizerFrom, { sourceType: 'filesystem', readTensorInfo: false })
  const tokenizer = info.metadata.tokenizer as unknown as {
    ggml: { model: string, tokens: string[], scores: number[], token_type: number[], bos_token_id: number, eos_token_id: number, unknown_token_id: number }
    chat_template?: string
  }
  const vocab = tokenizer.ggml.tokens.length
  const { embedding, layers, heads, kvHeads, ffn } = shape
  const kv = (embedding / heads) * kvHeads
  const metadata: Array<[string, MetadataValue]> = [
    ['general.architecture', { type: 'string', value: 'llama' }],
    ['general.name', { type: 'string', value: `random llama, ${shapeName} shape` }],
    ['general.file_type', { type: 'u32', value: 7 }], // mostly Q8_0
    ['general.alignment', { type: 'u32', value: 32 }],
    ['llama.vocab_size', { type: 'u32', value: vocab }],
    ['llama.context_length', { type: 'u32', value: contextLength }],
    ['llama.embedding_length', { type: 'u32', value: embedding }],
    ['llama.block_count', { type: 'u32', value: layers }],
    ['llama.feed_forward_length', { type: 'u32', value: ffn }],
    ['llama.attention.head_count', { type: 'u32', value: heads }],
    ['llama.attention.head_count_kv', { type: 'u32', value: kvHeads }],
    ['llama.rope.dimension_count', { type: 'u32', value: embedding / heads }],
    ['llama.rope.freq_base', { type: 'f32', value: shape.ropeBase }],
    ['llama.attention.layer_norm_rms_epsilon', { type: 'f32', value: 1e-5 }],
    ['tokenizer.ggml.model', { type: 'string', value: tokenizer.ggml.model }],
    ['tokenizer.ggml.tokens', { type: 'string[]', value: tokenizer.ggml.tokens }],
    ['tokenizer.ggml.scores', { type: 'f32[]', value: tokenizer.ggml.scores }],
    ['tokenizer.ggml.token_type', { type: 'i32[]', value: tokenizer.ggml.token_type }],
    ['tokenizer.ggml.bos_token_id', { type: 'u32', value: tokenizer.ggml.bos_token_id }],
    ['tokenizer.ggml.eos_token_id', { type: 'u32', value: tokenizer.ggml.eos_token_id }],
    ['tokenizer.ggml.unknown_token_id', { type: 'u32', value: tokenizer.ggml.unknown_token_id }],
    ['tokenizer.ggml.add_bos_token', { type: 'bool', value: true }],
    ['tokenizer.ggml.add_eos_token', { type: 'bool', value: false }]
  ]
  if (tokenizer.chat_template != null) metadata.push(['tokenizer.chat_template', { type: 'string', value: tokenizer.chat_template }])

  const random = byteGenerator(shape.seed)
  const q8 = (name: string, dims: number[]): GgufTensor => ({ name, dims, type: 'q8_0', data: randomQ8(dims[0] * dims[1], random) })
  const ones = (name: string): GgufTensor => ({ name, dims: [embedding], type: 'f32', data: new Float32Array(embedding).fill(1) })
  // No output.weight: llama.cpp then uses token_embd for the output, as SmolLM2's tied embeddings do.
  const tensors: GgufTensor[] = [q8('token_embd.weight', [embedding, vocab]), ones('output_norm.weight')]
  for (let layer = 0; layer < layers; layer++) {
    const block = `blk.${layer}`
    tensors.push(
      ones(`${block}.attn_norm.weight`),
      q8(`${block}.attn_q.weight`, [embedding, embedding]),
      q8(`${block}.attn_k.weight`, [embedding, kv]),
      q8(`${block}.attn_v.weight`, [embedding, kv]),
      q8(`${block}.attn_output.weight`, [embedding, embedding]),
      ones(`${block}.ffn_norm.weight`),
      q8(`${block}.ffn_gate.weight`, [embedding, ffn]),
      q8(`${block}.ffn_up.weight`, [embedding, ffn]),
      q8(`${block}.ffn_down.weight`, [ffn, embedding])
    )
  }
  await mkdir(dirname(path), { recursive: true })
  await writeFile(`${path}.partial`, encodeGguf(metadata, tensors))
  await rename(`${path}.partial`, path) // a bench cut short never leaves a truncated model behind
  return path
}

function randomQ8 (weights: number, random: () => number): Buffer {
  const blocks = weights / Q8_0_BLOCK.weights
  const data = Buffer.alloc(blocks * Q8_0_BLOCK.bytes)
  for (let block = 0; block < blocks; block++) {
    const at = block * Q8_0_BLOCK.bytes
    data.writeUInt16LE(Q8_SCALE_F16, at)
    for (let i = 0; i < Q8_0_BLOCK.weights; i++) data[at + 2 + i] = random()
  }
  return data
}

/** Seeded mulberry32 bytes: the same model on every run and machine. */
function byteGenerator (seed: number): () => number {
  let state = seed >>> 0
  return () => {
    state = (state + 0x6d2b79f5) >>> 0
    let t = state
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) & 0xFF
  }
}
