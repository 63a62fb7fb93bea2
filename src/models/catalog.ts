// The curated catalog: a few real small GGUF chat models on Hugging Face that run on a laptop CPU. An entry's id is
// what users type (`meshnode models download smollm2-135m-instruct-q8_0`); repo and file are exactly as on the hub.
// Sizes are the hub's listed sizes, rounded: they let the storage budget judge a download before the hub answers,
// and the exact size (X-Linked-Size) replaces them once it does. No sha256 is written here unless we have checked it
// ourselves; without one the hub's X-Linked-Etag (the LFS object's sha256) verifies the file.

export interface CatalogEntry {
  /** Lowercase; matched case-insensitively. */
  readonly id: string
  readonly name: string
  readonly family: string
  /** As model cards say it: "135M", "0.5B". */
  readonly parameters: string
  /** llama.cpp's name of the quantization, uppercase: "Q8_0", "Q4_K_M". */
  readonly quantization: string
  /** Approximate, from the hub's listing; the download uses the exact size the hub announces. */
  readonly sizeBytes: number
  /** `<org>/<repo>` on the hub. */
  readonly repo: string
  /** Path of the GGUF inside the repo. */
  readonly file: string
  readonly sha256: string | null
  /** The context the model was trained for, in tokens. */
  readonly contextLength: number
}

export const CATALOG: readonly CatalogEntry[] = Object.freeze([
  {
    id: 'smollm2-135m-instruct-q8_0',
    name: 'SmolLM2 135M Instruct',
    family: 'smollm2',
    parameters: '135M',
    quantization: 'Q8_0',
    sizeBytes: 145_000_000,
    repo: 'HuggingFaceTB/SmolLM2-135M-Instruct-GGUF',
    file: 'smollm2-135m-instruct-q8_0.gguf',
    sha256: null,
    contextLength: 8192
  },
  {
    id: 'smollm2-360m-instruct-q8_0',
    name: 'SmolLM2 360M Instruct',
    family: 'smollm2',
    parameters: '360M',
    quantization: 'Q8_0',
    sizeBytes: 386_000_000,
    repo: 'HuggingFaceTB/SmolLM2-360M-Instruct-GGUF',
    file: 'smollm2-360m-instruct-q8_0.gguf',
    sha256: null,
    contextLength: 8192
  },
  {
    id: 'qwen2.5-0.5b-instruct-q4_k_m',
    name: 'Qwen2.5 0.5B Instruct',
    family: 'qwen2.5',
    parameters: '0.5B',
    quantization: 'Q4_K_M',
    sizeBytes: 491_000_000,
    repo: 'Qwen/Qwen2.5-0.5B-Instruct-GGUF',
    file: 'qwen2.5-0.5b-instruct-q4_k_m.gguf',
    sha256: null,
    contextLength: 32768
  },
  {
    id: 'qwen2.5-0.5b-instruct-q8_0',
    name: 'Qwen2.5 0.5B Instruct',
    family: 'qwen2.5',
    parameters: '0.5B',
    quantization: 'Q8_0',
    sizeBytes: 676_000_000,
    repo: 'Qwen/Qwen2.5-0.5B-Instruct-GGUF',
    file: 'qwen2.5-0.5b-instruct-q8_0.gguf',
    sha256: null,
    contextLength: 32768
  },
  {
    id: 'tinyllama-1.1b-chat-v1.0-q4_k_m',
    name: 'TinyLlama 1.1B Chat v1.0',
    family: 'llama',
    parameters: '1.1B',
    quantization: 'Q4_K_M',
    sizeBytes: 669_000_000,
    repo: 'TheBloke/TinyLlama-1.1B-Chat-v1.0-GGUF',
    file: 'tinyllama-1.1b-chat-v1.0.Q4_K_M.gguf',
    sha256: null,
    contextLength: 2048
  },
  {
    id: 'llama-3.2-1b-instruct-q4_k_m',
    name: 'Llama 3.2 1B Instruct',
    family: 'llama3.2',
    parameters: '1B',
    quantization: 'Q4_K_M',
    sizeBytes: 808_000_000,
    repo: 'bartowski/Llama-3.2-1B-Instruct-GGUF',
    file: 'Llama-3.2-1B-Instruct-Q4_K_M.gguf',
    sha256: null,
    contextLength: 131072
  },
  {
    id: 'qwen2.5-1.5b-instruct-q4_k_m',
    name: 'Qwen2.5 1.5B Instruct',
    family: 'qwen2.5',
    parameters: '1.5B',
    quantization: 'Q4_K_M',
    sizeBytes: 1_120_000_000,
    repo: 'Qwen/Qwen2.5-1.5B-Instruct-GGUF',
    file: 'qwen2.5-1.5b-instruct-q4_k_m.gguf',
    sha256: null,
    contextLength: 32768
  }
].map((entry) => Object.freeze(entry)))

const BY_ID = new Map(CATALOG.map((entry) => [entry.id, entry]))

/** The catalog entry with this id, case-insensitively; null when there is none. */
export function findCatalogEntry (id: string): CatalogEntry | null {
  return BY_ID.get(id.toLowerCase()) ?? null
}

/** The catalog entry that is this file of this repo (both compared case-insensitively), if any. */
export function findCatalogFile (repo: string, file: string): CatalogEntry | null {
  const r = repo.toLowerCase()
  const f = file.toLowerCase()
  return CATALOG.find((entry) => entry.repo.toLowerCase() === r && entry.file.toLowerCase() === f) ?? null
}

/** The catalog entry of this repo at this quantization, if any. */
export function findCatalogQuant (repo: string, quantization: string): CatalogEntry | null {
  const r = repo.toLowerCase()
  const q = quantization.toUpperCase()
  return CATALOG.find((entry) => entry.repo.toLowerCase() === r && entry.quantization === q) ?? null
}
