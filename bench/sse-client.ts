// The benches' chat client. It is deliberately light (node:http, and JSON parsing only of the events it needs: the
// first content delta and the usage), so the figure measures the server's path, not this client's. bench:inference and
// bench:peer run it as a worker thread, so its work does not run on the server's event loop; bench:llama-server, whose
// servers are child processes, calls `streamChat` directly.
import { request } from 'node:http'
import { parentPort } from 'node:worker_threads'

interface Job { url: string, body: unknown, streams: number }
export interface StreamSample { ttftMs: number, tokens: number, seconds: number }

export interface ChatStreamResult {
  /** From the request's start to the first non-empty content delta. */
  ttftMs: number
  /** From the request's start to the last content delta. */
  lastMs: number
  /** From the request's start to the end of the response. */
  endMs: number
  /** `usage.completion_tokens`, or the number of content events when the server sent no usage. */
  tokens: number
  /** `usage.prompt_tokens_details.cached_tokens` (null when the server reports none). */
  cachedTokens: number | null
  /** `usage.prompt_tokens` (null when the server sent no usage). */
  promptTokens: number | null
  /** The `X-Served-By` header: meshnode's `local` or `peer:<nodeID>`; null from other servers. */
  servedBy: string | null
  /** The answer's text, when asked for (`collectText`): every event is then parsed. */
  text: string
}

/** Streams one chat completion (`body.stream` must be true) and times it from `started` (default: now). */
export async function streamChat (url: string, body: unknown, options: { collectText?: boolean, started?: number, headers?: Record<string, string> } = {}): Promise<ChatStreamResult> {
  const started = options.started ?? performance.now()
  const target = new URL(url)
  const payload = JSON.stringify(body)
  return await new Promise((resolve, reject) => {
    const req = request({
      // A connection per request: llama-server closes idle keep-alive connections, which a reused socket finds too late.
      hostname: target.hostname, port: target.port, path: target.pathname, method: 'POST', agent: false,
      headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload), ...options.headers }
    }, (res) => {
      if (res.statusCode !== 200) {
        let error = ''
        res.setEncoding('utf8')
        res.on('data', (text: string) => { error += text })
        res.on('end', () => { reject(new Error(`${url} answered ${res.statusCode}: ${error}`)) })
        return
      }
      let first = 0
      let last = 0
      let events = 0
      let tokens: number | null = null
      let cachedTokens: number | null = null
      let promptTokens: number | null = null
      const servedBy = typeof res.headers['x-served-by'] === 'string' ? res.headers['x-served-by'] : null
      let text = ''
      let buffer = ''
      res.setEncoding('utf8')
      res.on('data', (chunk: string) => {
        buffer += chunk
        let end: number
        while ((end = buffer.indexOf('\n\n')) !== -1) {
          const event = buffer.slice(0, end)
          buffer = buffer.slice(end + 2)
          if (event.includes('"content":"') && !event.includes('"content":""')) {
            last = performance.now()
            if (first === 0) first = last
            events++
            if (options.collectText === true) {
              const parsed = JSON.parse(event.slice(event.indexOf('{'))) as { choices: Array<{ delta: { content?: string } }> }
              text += parsed.choices[0]?.delta.content ?? ''
            }
          }
          if (event.includes('"usage":{')) {
            const { usage } = JSON.parse(event.slice(event.indexOf('{'))) as { usage: { completion_tokens: number, prompt_tokens: number, prompt_tokens_details?: { cached_tokens?: number } } }
            tokens = usage.completion_tokens
            promptTokens = usage.prompt_tokens
            cachedTokens = usage.prompt_tokens_details?.cached_tokens ?? null
          }
        }
      })
      res.on('end', () => {
        const now = performance.now()
        resolve({ ttftMs: first - started, lastMs: last - started, endMs: now - started, tokens: tokens ?? events, cachedTokens, promptTokens, servedBy, text })
      })
      res.on('error', reject)
    })
    req.on('error', reject)
    req.end(payload)
  })
}

// One worker serves every run of a benchmark shape, so its own start-up (and the first connection) is paid once.
parentPort?.on('message', (job: Job) => {
  const started = performance.now()
  Promise.all(Array.from({ length: job.streams }, async () => await streamChat(job.url, job.body, { started }))).then((results) => {
    const samples: StreamSample[] = results.map((r) => ({ ttftMs: r.ttftMs, tokens: r.tokens, seconds: r.endMs / 1000 }))
    parentPort?.postMessage({ samples, wallSeconds: (performance.now() - started) / 1000 })
  }, (err: unknown) => { throw err })
})
