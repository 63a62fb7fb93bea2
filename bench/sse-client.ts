// Worker of bench:inference: reads `streams` concurrent chat streams off a node, as a separate OpenAI client would,
// on its own thread so that the client's parsing does not run on the server's event loop.
import { parentPort } from 'node:worker_threads'

interface Job { url: string, body: unknown, streams: number }
export interface StreamSample { ttftMs: number, tokens: number, seconds: number }

async function one (job: Job, started: number): Promise<StreamSample> {
  const response = await fetch(job.url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(job.body) })
  let first = 0
  let tokens = 0
  const decoder = new TextDecoder()
  let buffer = ''
  for await (const bytes of response.body ?? []) {
    buffer += decoder.decode(bytes as Uint8Array, { stream: true })
    let end: number
    while ((end = buffer.indexOf('\n\n')) !== -1) {
      const line = buffer.slice(0, end)
      buffer = buffer.slice(end + 2)
      if (!line.startsWith('data: {')) continue
      const chunk = JSON.parse(line.slice(6)) as { choices: Array<{ delta: { content?: string } }>, usage?: { completion_tokens: number } | null }
      if (first === 0 && (chunk.choices[0]?.delta.content ?? '') !== '') first = performance.now()
      if (chunk.usage != null) tokens = chunk.usage.completion_tokens
    }
  }
  return { ttftMs: first - started, tokens, seconds: (performance.now() - started) / 1000 }
}

// One worker serves every run of a benchmark shape, so its own start-up (and fetch's first connection) is paid once.
parentPort?.on('message', (job: Job) => {
  const started = performance.now()
  Promise.all(Array.from({ length: job.streams }, () => one(job, started))).then((samples) => {
    parentPort?.postMessage({ samples, wallSeconds: (performance.now() - started) / 1000 })
  }, (err: unknown) => { throw err })
})
