// A tiny random-weight llama model written by our own GGUF writer, so tests load a real model through node-llama-cpp
// without downloading anything (the generated tiny GGUF instead of mocks of the engine).
import { createHash } from 'node:crypto'
import { writeFile } from 'node:fs/promises'

/** ChatML, with the BOS the llama tokenizer adds, so node-llama-cpp finds it equivalent to its ChatML wrapper. */
export const CHATML_TEMPLATE =
  "{{ bos_token }}{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + " +
  "'<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"

export const TINY_GGUF_CONTEXT_LENGTH = 512

/**
 * ChatML as reasoning models have it (Qwen3, DeepSeek-R1 distills): the model's turn opens inside a thought, which it
 * closes with </think> before its answer; a thought sent back with the history is shown before that answer.
 */
export const THINKING_TEMPLATE =
  "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'assistant' %}{{ '<|im_start|>assistant\\n' }}" +
  "{% if message['reasoning_content'] %}{{ '<think>\\n' + message['reasoning_content'] + '\\n</think>\\n\\n' }}{% endif %}" +
  "{{ message['content'] + '<|im_end|>' + '\\n' }}{% else %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}" +
  "{% endif %}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n<think>\\n' }}{% endif %}"

export interface TinyGgufOptions {
  /** Seeds the weights; the same seed gives the same bytes. Default 1. */
  seed?: number
  /** `tokenizer.chat_template`; null leaves the key out. Default CHATML_TEMPLATE. */
  chatTemplate?: string | null
  /** `general.name`. Default 'meshnode tiny llama'. */
  name?: string
  /** `llama.context_length`: a long one lets a test hold a slot busy for a while. Default 512. */
  contextLength?: number
  /** Adds fill-in-the-middle tokens (`<|fim_prefix|>`, `<|fim_suffix|>`, `<|fim_middle|>`), as code models have. */
  infill?: boolean
  /**
   * End tokens and byte tokens get weights too (by default they are never chosen): a sampled answer then ends by itself,
   * and holds characters that span tokens, or broken ones.
   */
  unruly?: boolean
  /** One attention head as wide as the embedding (64 values) instead of four of 16: a head size real models have. */
  oneHead?: boolean
  /**
   * A reasoning model's shape: `<think>` and `</think>` control tokens and THINKING_TEMPLATE (unless `chatTemplate` is
   * given). Its answers open inside a thought, which only a thought budget closes (the weights never pick </think>).
   */
  thinking?: boolean
  /** An embedding model's shape: `llama.pooling_type` mean, as llama.cpp's converter writes for embedding models. */
  pooling?: boolean
}

export interface TinyGguf { path: string, sha256: string, sizeBytes: number }

const GGUF_MAGIC = 0x46554747 // "GGUF" read as a little-endian u32
const GGUF_VERSION = 3
const ALIGNMENT = 32
const GGML_TYPE_F32 = 0

const EMBEDDING = 64
const LAYERS = 2
const HEADS = 4
const KV_HEADS = 2 // fewer kv heads than heads exercises grouped-query attention, as in real small models
const FFN = 128
const RMS_EPS = 1e-5

// Token types of llama.cpp's vocabulary (llama_token_type)
const TOKEN_NORMAL = 1
const TOKEN_UNKNOWN = 2
const TOKEN_CONTROL = 3
const TOKEN_BYTE = 6

const WORDS = (
  'the of and to in is you that it he was for on are as with his they at be this have from or one had by word but ' +
  'not what all were we when your can said there use an each which she do how their if will up other about out many ' +
  'then them these so some her would make like him into time has look two more write go see number no way could ' +
  'people my than first water been call who oil its now find long down day did get come made may part hello world ' +
  'model node peer network credit answer question think know good new help thanks yes please great small'
).split(' ')

/** Writes the tiny model to `path` and returns its sha256 and size. */
export async function writeTinyGguf (path: string, options: TinyGgufOptions = {}): Promise<TinyGguf> {
  const bytes = encodeTinyGguf(options)
  await writeFile(path, bytes)
  return { path, sha256: createHash('sha256').update(bytes).digest('hex'), sizeBytes: bytes.length }
}

interface Vocabulary { tokens: string[], scores: number[], types: number[] }

const FIM_TOKENS = ['<|fim_prefix|>', '<|fim_suffix|>', '<|fim_middle|>'] as const

const THINK_TOKENS = ['<think>', '</think>'] as const

function buildVocabulary (infill: boolean, thinking: boolean): Vocabulary {
  const vocabulary: Vocabulary = { tokens: [], scores: [], types: [] }
  const seen = new Set<string>()
  const add = (token: string, type: number, score: number): void => {
    if (seen.has(token)) return
    seen.add(token)
    vocabulary.tokens.push(token)
    vocabulary.types.push(type)
    vocabulary.scores.push(score)
  }
  add('<unk>', TOKEN_UNKNOWN, 0)
  add('<s>', TOKEN_CONTROL, 0)
  add('</s>', TOKEN_CONTROL, 0)
  // Byte fallback: any text tokenizes, and llama.cpp finds its newline token as <0x0A>
  for (let byte = 0; byte < 256; byte++) {
    add(`<0x${byte.toString(16).toUpperCase().padStart(2, '0')}>`, TOKEN_BYTE, 0)
  }
  add('<|im_start|>', TOKEN_CONTROL, 0)
  add('<|im_end|>', TOKEN_CONTROL, 0)
  if (infill) for (const token of FIM_TOKENS) add(token, TOKEN_CONTROL, 0)
  if (thinking) for (const token of THINK_TOKENS) add(token, TOKEN_CONTROL, 0)
  let rank = 0
  const single = '▁abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.,!?\'-:;()'
  for (const char of single) add(char, TOKEN_NORMAL, -(rank++))
  // SentencePiece merges two adjacent pieces only when their concatenation is itself a piece, so every prefix of a
  // word must be in the vocabulary for the whole word to be reachable
  for (const word of WORDS) {
    const piece = `▁${word}`
    for (let end = 2; end <= piece.length; end++) add(piece.slice(0, end), TOKEN_NORMAL, -(rank++))
  }
  return vocabulary
}

/** A GGUF metadata value, as `encodeGguf` writes it. */
export type MetadataValue =
  | { type: 'u32', value: number }
  | { type: 'f32', value: number }
  | { type: 'bool', value: boolean }
  | { type: 'string', value: string }
  | { type: 'string[]', value: string[] }
  | { type: 'f32[]', value: number[] }
  | { type: 'i32[]', value: number[] }

// gguf_type
const VALUE_TYPE = { u32: 4, i32: 5, f32: 6, bool: 7, string: 8, array: 9 } as const

/** GGML_TYPE_Q8_0 blocks: 32 weights as one f16 scale and 32 int8 values (34 bytes), llama.cpp's common 8-bit format. */
export const Q8_0_BLOCK = { weights: 32, bytes: 34 } as const
const GGML_TYPE_Q8_0 = 8

/** A tensor: float32 values, or Q8_0 blocks already encoded. ggml lists `dims` innermost first. */
export type GgufTensor =
  | { name: string, dims: number[], type: 'f32', data: Float32Array }
  | { name: string, dims: number[], type: 'q8_0', data: Buffer }

function encodeTinyGguf (options: TinyGgufOptions): Buffer {
  const { seed = 1, thinking = false, chatTemplate = thinking ? THINKING_TEMPLATE : CHATML_TEMPLATE, name = 'meshnode tiny llama', contextLength = TINY_GGUF_CONTEXT_LENGTH, infill = false, unruly = false, oneHead = false } = options
  const heads = oneHead ? 1 : HEADS
  const kvHeads = oneHead ? 1 : KV_HEADS
  const vocabulary = buildVocabulary(infill, thinking)
  const metadata: Array<[string, MetadataValue]> = [
    ['general.architecture', { type: 'string', value: 'llama' }],
    ['general.name', { type: 'string', value: name }],
    ['general.file_type', { type: 'u32', value: 0 }], // all f32
    ['general.alignment', { type: 'u32', value: ALIGNMENT }],
    ['llama.vocab_size', { type: 'u32', value: vocabulary.tokens.length }],
    ['llama.context_length', { type: 'u32', value: contextLength }],
    ['llama.embedding_length', { type: 'u32', value: EMBEDDING }],
    ['llama.block_count', { type: 'u32', value: LAYERS }],
    ['llama.feed_forward_length', { type: 'u32', value: FFN }],
    ['llama.attention.head_count', { type: 'u32', value: heads }],
    ['llama.attention.head_count_kv', { type: 'u32', value: kvHeads }],
    ['llama.rope.dimension_count', { type: 'u32', value: EMBEDDING / heads }],
    ['llama.rope.freq_base', { type: 'f32', value: 10000 }],
    ['llama.attention.layer_norm_rms_epsilon', { type: 'f32', value: RMS_EPS }],
    ...(options.pooling === true ? [['llama.pooling_type', { type: 'u32', value: 1 }] as [string, MetadataValue]] : []),
    ['tokenizer.ggml.model', { type: 'string', value: 'llama' }],
    ['tokenizer.ggml.tokens', { type: 'string[]', value: vocabulary.tokens }],
    ['tokenizer.ggml.scores', { type: 'f32[]', value: vocabulary.scores }],
    ['tokenizer.ggml.token_type', { type: 'i32[]', value: vocabulary.types }],
    ['tokenizer.ggml.unknown_token_id', { type: 'u32', value: 0 }],
    ['tokenizer.ggml.bos_token_id', { type: 'u32', value: 1 }],
    ['tokenizer.ggml.eos_token_id', { type: 'u32', value: 2 }],
    ['tokenizer.ggml.add_bos_token', { type: 'bool', value: true }],
    ['tokenizer.ggml.add_eos_token', { type: 'bool', value: false }]
  ]
  if (chatTemplate != null) metadata.push(['tokenizer.chat_template', { type: 'string', value: chatTemplate }])
  if (infill) {
    const [prefix, suffix, middle] = FIM_TOKENS.map((token) => vocabulary.tokens.indexOf(token))
    metadata.push(
      ['tokenizer.ggml.fim_pre_token_id', { type: 'u32', value: prefix }],
      ['tokenizer.ggml.fim_suf_token_id', { type: 'u32', value: suffix }],
      ['tokenizer.ggml.fim_mid_token_id', { type: 'u32', value: middle }]
    )
  }
  return encodeGguf(metadata, buildTensors(vocabulary, seed, unruly, (EMBEDDING / heads) * kvHeads))
}

/** A whole GGUF (v3) file: the metadata in order, then the tensors' descriptions and their aligned data. */
export function encodeGguf (metadata: ReadonlyArray<[string, MetadataValue]>, tensors: readonly GgufTensor[]): Buffer {
  const out = new GgufBuffer()
  out.u32(GGUF_MAGIC)
  out.u32(GGUF_VERSION)
  out.u64(tensors.length)
  out.u64(metadata.length)
  for (const [key, value] of metadata) {
    out.string(key)
    out.value(value)
  }
  let offset = 0 // relative to the start of the data section
  for (const tensor of tensors) {
    out.string(tensor.name)
    out.u32(tensor.dims.length)
    for (const dim of tensor.dims) out.u64(dim)
    out.u32(tensor.type === 'f32' ? GGML_TYPE_F32 : GGML_TYPE_Q8_0)
    out.u64(offset)
    offset = alignUp(offset + tensor.data.byteLength)
  }
  out.padTo(ALIGNMENT)
  for (const tensor of tensors) {
    out.bytes(Buffer.from(tensor.data.buffer, tensor.data.byteOffset, tensor.data.byteLength))
    out.padTo(ALIGNMENT)
  }
  return out.toBuffer()
}

function buildTensors (vocabulary: Vocabulary, seed: number, unruly: boolean, kv: number): GgufTensor[] {
  const random = normalGenerator(seed)
  const vocab = vocabulary.tokens.length
  const ones = (n: number): Float32Array => new Float32Array(n).fill(1)
  const noise = (n: number, scale: number): Float32Array => Float32Array.from({ length: n }, () => random() * scale)
  // ggml lists dims innermost first: a [EMBEDDING, vocab] matrix is vocab rows of EMBEDDING floats
  const output = noise(EMBEDDING * vocab, 0.2)
  // Zero logits for every non-normal token: random weights would otherwise sometimes pick </s> or <|im_end|> first
  // (an empty answer) or a lone UTF-8 byte (unreadable text). With greedy sampling the answer is always words, and
  // the model never stops by itself: tests bound it with maxTokens. `unruly` keeps the end tokens and the bytes.
  const kept = (token: number): boolean => vocabulary.types[token] === TOKEN_NORMAL ||
    (unruly && (vocabulary.types[token] === TOKEN_BYTE || ['</s>', '<|im_end|>'].includes(vocabulary.tokens[token])))
  for (let token = 0; token < vocab; token++) {
    if (!kept(token)) output.fill(0, token * EMBEDDING, (token + 1) * EMBEDDING)
  }
  const tensors: GgufTensor[] = [
    { name: 'token_embd.weight', dims: [EMBEDDING, vocab], type: 'f32', data: noise(EMBEDDING * vocab, 1) },
    { name: 'output_norm.weight', dims: [EMBEDDING], type: 'f32', data: ones(EMBEDDING) },
    { name: 'output.weight', dims: [EMBEDDING, vocab], type: 'f32', data: output }
  ]
  for (let layer = 0; layer < LAYERS; layer++) {
    const block = `blk.${layer}`
    tensors.push(
      { name: `${block}.attn_norm.weight`, dims: [EMBEDDING], type: 'f32', data: ones(EMBEDDING) },
      { name: `${block}.attn_q.weight`, dims: [EMBEDDING, EMBEDDING], type: 'f32', data: noise(EMBEDDING * EMBEDDING, 0.1) },
      { name: `${block}.attn_k.weight`, dims: [EMBEDDING, kv], type: 'f32', data: noise(EMBEDDING * kv, 0.1) },
      { name: `${block}.attn_v.weight`, dims: [EMBEDDING, kv], type: 'f32', data: noise(EMBEDDING * kv, 0.1) },
      { name: `${block}.attn_output.weight`, dims: [EMBEDDING, EMBEDDING], type: 'f32', data: noise(EMBEDDING * EMBEDDING, 0.1) },
      { name: `${block}.ffn_norm.weight`, dims: [EMBEDDING], type: 'f32', data: ones(EMBEDDING) },
      { name: `${block}.ffn_gate.weight`, dims: [EMBEDDING, FFN], type: 'f32', data: noise(EMBEDDING * FFN, 0.1) },
      { name: `${block}.ffn_up.weight`, dims: [EMBEDDING, FFN], type: 'f32', data: noise(EMBEDDING * FFN, 0.1) },
      { name: `${block}.ffn_down.weight`, dims: [FFN, EMBEDDING], type: 'f32', data: noise(FFN * EMBEDDING, 0.1) }
    )
  }
  return tensors
}

/** Standard normal samples from a seeded mulberry32 generator (Box-Muller): reproducible on every platform. */
function normalGenerator (seed: number): () => number {
  let state = seed >>> 0
  const uniform = (): number => {
    state = (state + 0x6d2b79f5) >>> 0
    let t = state
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return (((t ^ (t >>> 14)) >>> 0) + 1) / 4294967297 // in (0, 1): log() below never sees 0
  }
  return () => Math.sqrt(-2 * Math.log(uniform())) * Math.cos(2 * Math.PI * uniform())
}

function alignUp (n: number): number {
  return Math.ceil(n / ALIGNMENT) * ALIGNMENT
}

/** Little-endian GGUF encoder: appends chunks, joins them once at the end. */
class GgufBuffer {
  private readonly chunks: Buffer[] = []
  private length = 0

  bytes (chunk: Buffer): void {
    this.chunks.push(chunk)
    this.length += chunk.length
  }

  u32 (n: number): void {
    const b = Buffer.alloc(4)
    b.writeUInt32LE(n)
    this.bytes(b)
  }

  i32 (n: number): void {
    const b = Buffer.alloc(4)
    b.writeInt32LE(n)
    this.bytes(b)
  }

  u64 (n: number): void {
    const b = Buffer.alloc(8)
    b.writeBigUInt64LE(BigInt(n))
    this.bytes(b)
  }

  f32 (n: number): void {
    const b = Buffer.alloc(4)
    b.writeFloatLE(n)
    this.bytes(b)
  }

  string (s: string): void {
    const utf8 = Buffer.from(s, 'utf8')
    this.u64(utf8.length)
    this.bytes(utf8)
  }

  value (v: MetadataValue): void {
    switch (v.type) {
      case 'u32': this.u32(VALUE_TYPE.u32); this.u32(v.value); return
      case 'f32': this.u32(VALUE_TYPE.f32); this.f32(v.value); return
      case 'bool': this.u32(VALUE_TYPE.bool); this.bytes(Buffer.from([v.value ? 1 : 0])); return
      case 'string': this.u32(VALUE_TYPE.string); this.string(v.value); return
      case 'string[]': this.arrayHeader(VALUE_TYPE.string, v.value.length); v.value.forEach((s) => this.string(s)); return
      case 'f32[]': this.arrayHeader(VALUE_TYPE.f32, v.value.length); v.value.forEach((n) => this.f32(n)); return
      case 'i32[]': this.arrayHeader(VALUE_TYPE.i32, v.value.length); v.value.forEach((n) => this.i32(n))
    }
  }

  padTo (alignment: number): void {
    const padding = (alignment - (this.length % alignment)) % alignment
    if (padding > 0) this.bytes(Buffer.alloc(padding))
  }

  toBuffer (): Buffer {
    return Buffer.concat(this.chunks, this.length)
  }

  private arrayHeader (elementType: number, count: number): void {
    this.u32(VALUE_TYPE.array)
    this.u32(elementType)
    this.u64(count)
  }
}
