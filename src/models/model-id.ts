// The one matcher for model ids, used by the model store, the HTTP routes and the peer network alike:
// a catalog id (`smollm2-135m-instruct-q8_0`), a file on the hub (`hf.co/<org>/<repo>/<file>.gguf`) or a quantization
// of a hub repo (`hf.co/<org>/<repo>:<QUANT>`). Ids arrive from HTTP bodies and from peers, and parts of them become
// paths on disk, so every segment is checked here, once, before anything else sees it.
import { findCatalogEntry, findCatalogFile, findCatalogQuant, type CatalogEntry } from './catalog.ts'
import { InvalidModelIDError } from './errors.ts'

export const MAX_MODEL_ID_LENGTH = 256
/**
 * `hf.co/<org>/<repo>` without a quantization: the first of these the repo offers, else its first single-file GGUF
 * (llama.cpp's order; Ollama's default is the first of them).
 */
export const DEFAULT_QUANTS: readonly string[] = ['Q4_K_M', 'Q8_0']

export type ModelRef =
  /** A catalog entry, also when it was named by its hub file or quantization. */
  | { kind: 'catalog', modelID: string, entry: CatalogEntry, repo: string, file: string }
  | { kind: 'hf-file', modelID: string, repo: string, file: string }
  /** The file is found by the hub's file list (see pickQuantFile); a null quant: DEFAULT_QUANTS, then the first file. */
  | { kind: 'hf-quant', modelID: string, repo: string, quant: string | null }
  /** Well-formed, but names nothing we know: the caller decides (the store answers 404; a peer's may be newer). */
  | { kind: 'name', modelID: string }

const HUB_PREFIX = /^(?:https?:\/\/)?(?:www\.)?(?:hf\.co|huggingface\.co)\//i
const URL_PREFIX = /^https?:\/\//i
// Hub rules for user and repo names: letters, digits, `-`, `_`, `.`; the first a letter or digit; at most 96
const REPO_SEGMENT = /^[A-Za-z0-9][A-Za-z0-9._-]{0,95}$/
// A plain name, like a catalog id or an Ollama-style tag (`qwen2.5:0.5b`)
const PLAIN_NAME = /^[A-Za-z0-9][A-Za-z0-9._:+-]{0,127}$/
const QUANT = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,31}$/
const CONTROL = /[\u0000-\u001f\u007f-\u009f]/ // eslint-disable-line no-control-regex
// Characters no file name may carry on any platform we run on, and the path separators of all of them
const UNSAFE_IN_FILE = /[\\:*?"<>|]/
const SPLIT_GGUF = /-\d{5}-of-\d{5}\.gguf$/i

/**
 * Parses and normalises a model id. Throws InvalidModelIDError (an InvalidInputError on `modelID`) for anything
 * malformed or unsafe: `..` or `.` segments, absolute paths, backslashes, control characters, a file that is not a
 * single-file `.gguf`. Ids that name a catalog entry (by id, hub file or repo and quantization) become its id.
 */
export function parseModelID (raw: string): ModelRef {
  const input = raw.trim()
  const invalid = (reason: string): InvalidModelIDError => new InvalidModelIDError(raw, reason)
  if (input === '') throw invalid('it is empty')
  if (raw.length > MAX_MODEL_ID_LENGTH) throw invalid(`it is longer than ${MAX_MODEL_ID_LENGTH} characters`)
  if (CONTROL.test(raw)) throw invalid('it contains control characters')
  if (input.includes('\\')) throw invalid('it contains a backslash')

  const hub = HUB_PREFIX.exec(input)
  if (hub == null) {
    if (input.startsWith('/') || input.startsWith('.') || input.includes('/')) {
      throw invalid('use a catalog id, hf.co/<org>/<repo>/<file>.gguf or hf.co/<org>/<repo>:<QUANT>')
    }
    if (!PLAIN_NAME.test(input)) throw invalid('a model name has letters, digits and . _ : + - only')
    const entry = findCatalogEntry(input)
    return entry == null ? { kind: 'name', modelID: input.toLowerCase() } : catalogRef(entry)
  }

  let path = input.slice(hub[0].length)
  // A URL copied from the browser may carry `?download=true`; an id without the scheme has no query to strip
  if (URL_PREFIX.test(input)) path = path.replace(/[?#].*$/, '')
  const segments = path.split('/')
  if (segments.length < 2) throw invalid('expected hf.co/<org>/<repo>/<file>.gguf or hf.co/<org>/<repo>:<QUANT>')
  const org = segments[0]
  let repoName = segments[1]
  let rest = segments.slice(2)
  // The browser's file URLs: /<org>/<repo>/resolve/main/<file> and /<org>/<repo>/blob/main/<file>
  if ((rest[0] === 'resolve' || rest[0] === 'blob') && rest.length >= 3) {
    if (rest[1] !== 'main') throw invalid(`only the main revision is supported, not ${rest[1]}`)
    rest = rest.slice(2)
  }

  let quant: string | null = null
  const colon = rest.length === 0 ? repoName.indexOf(':') : -1
  if (colon >= 0) {
    quant = repoName.slice(colon + 1)
    repoName = repoName.slice(0, colon)
    if (!QUANT.test(quant)) throw invalid(`${JSON.stringify(quant)} is not a quantization name like Q4_K_M`)
  }
  for (const segment of [org, repoName]) checkRepoSegment(segment, invalid)
  const repo = `${org}/${repoName}`

  if (rest.length === 0) {
    if (quant == null) {
      // The repo's default: the catalog's entry when it has one for the quantization the hub would give first
      const entry = DEFAULT_QUANTS.map((q) => findCatalogQuant(repo, q)).find((e) => e != null)
      return entry == null ? { kind: 'hf-quant', modelID: `hf.co/${repo}`, repo, quant: null } : catalogRef(entry)
    }
    const upper = quant.toUpperCase()
    const entry = findCatalogQuant(repo, upper)
    return entry == null ? { kind: 'hf-quant', modelID: `hf.co/${repo}:${upper}`, repo, quant: upper } : catalogRef(entry)
  }
  for (const segment of rest) checkFileSegment(segment, invalid)
  const file = rest.join('/')
  if (!file.toLowerCase().endsWith('.gguf')) throw invalid('the file must be a .gguf')
  if (SPLIT_GGUF.test(file)) throw invalid('split GGUF files (-00001-of-0000N) are not supported; choose a single-file quantization')
  const entry = findCatalogFile(repo, file)
  return entry == null ? { kind: 'hf-file', modelID: `hf.co/${repo}/${file}`, repo, file } : catalogRef(entry)
}

function catalogRef (entry: CatalogEntry): ModelRef {
  return { kind: 'catalog', modelID: entry.id, entry, repo: entry.repo, file: entry.file }
}

function checkRepoSegment (segment: string, invalid: (reason: string) => Error): void {
  if (segment === '' || segment === '.' || segment === '..') throw invalid(`${JSON.stringify(segment)} is not a hub user or repo name`)
  if (!REPO_SEGMENT.test(segment) || segment.includes('..')) {
    throw invalid(`${JSON.stringify(segment)} is not a hub user or repo name (letters, digits, . _ -)`)
  }
}

function checkFileSegment (segment: string, invalid: (reason: string) => Error): void {
  if (segment === '') throw invalid('the file path has an empty segment')
  if (segment === '.' || segment === '..') throw invalid('the file path may not contain . or .. segments')
  if (UNSAFE_IN_FILE.test(segment)) throw invalid(`the file path may not contain any of \\ : * ? " < > |`)
  if (segment.trim() !== segment || segment.endsWith('.')) throw invalid('a file path segment may not start or end with a space or end with a dot')
  if (Buffer.byteLength(segment) > 255) throw invalid('a file path segment is longer than 255 bytes')
}

/** The canonical spelling of a model id (see parseModelID); throws InvalidModelIDError when it is not one. */
export function normaliseModelID (raw: string): string {
  return parseModelID(raw).modelID
}

/** The key ids are compared and stored by: ids match case-insensitively, as the hub's repo names do. */
export function modelKey (modelID: string): string {
  return normaliseModelID(modelID).toLowerCase()
}

/** Whether two ids name the same model. An id that is not valid matches nothing, itself included. */
export function sameModel (a: string, b: string): boolean {
  try {
    return modelKey(a) === modelKey(b)
  } catch (err) {
    if (err instanceof InvalidModelIDError) return false // a peer's garbage is simply not our model
    throw err
  }
}

/**
 * The file of `repo` that holds quantization `quant`: among the model files (see modelFiles), the one whose name has
 * the quantization as a whole token, case-insensitively; the shortest path when several do. With a null `quant`, the
 * first of DEFAULT_QUANTS the repo has, else its first model file (top-level first, then by name).
 */
export function pickQuantFile (files: readonly string[], quant: string | null): string | null {
  const candidates = modelFiles(files)
  candidates.sort((a, b) => a.split('/').length - b.split('/').length || a.length - b.length || a.localeCompare(b))
  if (quant == null) {
    for (const fallback of DEFAULT_QUANTS) {
      const file = pickQuantFile(candidates, fallback)
      if (file != null) return file
    }
    return [...candidates].sort((a, b) => a.split('/').length - b.split('/').length || a.localeCompare(b))[0] ?? null
  }
  const wanted = quant.toLowerCase()
  return candidates.find((file) => {
    const base = file.toLowerCase().slice(file.lastIndexOf('/') + 1)
    return tokenMatch(base.slice(0, -'.gguf'.length), wanted)
  }) ?? null
}

// Files beside a model that are not one: vision projectors, multi-token-prediction heads, importance matrices.
const SIDECAR = /(?:^|[^a-z0-9])(?:mmproj|imatrix)(?:[^a-z0-9]|$)|^mtp-/i

/** The single-file GGUF models among a repo's files: split parts and sidecars (mmproj, mtp-, imatrix) left out. */
function modelFiles (files: readonly string[]): string[] {
  return files.filter((file) => {
    const base = file.slice(file.lastIndexOf('/') + 1)
    return base.toLowerCase().endsWith('.gguf') && !SPLIT_GGUF.test(base) && !SIDECAR.test(base)
  })
}

function tokenMatch (name: string, quant: string): boolean {
  // `-q4_k_m`, `.Q4_K_M`, `_q8_0` at the end or before another `-`/`.`: the quantization is a whole token
  let from = 0
  for (;;) {
    const at = name.indexOf(quant, from)
    if (at < 0) return false
    const before = at === 0 ? '' : name[at - 1]
    const after = name[at + quant.length] ?? ''
    if (!/[a-z0-9]/.test(before) && !/[a-z0-9_]/.test(after)) return true
    from = at + 1
  }
}

const QUANT_IN_NAME = /(?:^|[^a-z0-9])((?:i?q\d(?:_[a-z0-9]+)*)|bf16|f16|f32)(?=[^a-z0-9_]|$)/i

/** The quantizations a repo offers as single files, from their names, for an error that lists them. */
export function quantsIn (files: readonly string[]): string[] {
  const found = new Set<string>()
  for (const file of modelFiles(files)) {
    const match = QUANT_IN_NAME.exec(file.slice(file.lastIndexOf('/') + 1).slice(0, -'.gguf'.length))
    if (match != null) found.add(match[1].toUpperCase())
  }
  return [...found].sort()
}

/** What a model's names say of it, for hub models outside the catalog: best effort, null when unsure. */
export function describeHubFile (repo: string, file: string): { name: string, family: string | null, parameters: string | null, quantization: string | null } {
  const repoName = repo.slice(repo.indexOf('/') + 1).replace(/[-_.]gguf$/i, '')
  const base = file.slice(file.lastIndexOf('/') + 1).replace(/\.gguf$/i, '')
  const quantization = QUANT_IN_NAME.exec(base)?.[1].toUpperCase() ?? null
  const parameters = /(?:^|[^a-z0-9.])(\d+(?:\.\d+)?[bm])(?=[^a-z0-9]|$)/i.exec(repoName)?.[1].toUpperCase() ??
    /(?:^|[^a-z0-9.])(\d+(?:\.\d+)?[bm])(?=[^a-z0-9]|$)/i.exec(base)?.[1].toUpperCase() ?? null
  const family = /^[a-z][a-z0-9.]*?(?=-|_|$)/i.exec(repoName)?.[0].toLowerCase() ?? null
  return { name: quantization == null ? repoName : `${repoName} ${quantization}`, family, parameters, quantization }
}
