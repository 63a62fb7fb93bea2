// Worker of bench:inference: reads `streams` concurrent chat streams off a node, on its own thread so that the
// client's work does not run on the server's event loop. It is deliberately light (node:http, and JSON parsing only
// of the events it needs: the first content delta and the usage), so the figure measures the server's path, not
// this client's.
import { request } from 'node:http'
import { parentPort } from 'node:worker_threads'

interface Job { url: string, body: unknown, streams: number }
export interface StreamSample { ttftMs: number, tokens: number, seconds: number }

async function one (job: Job, started: number): Promise<StreamSample> {
  const url = new URL(job.url)
  const body = JSON.stringify(job.body)
  return await new Promise((resolve, reject) => {
    const req = request({ hostname: url.hostname, port: url.port, path: url.pathname, method: 'POST', headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) } }, (res) => {
      let first = 0
      let tokens = 0
      let buffer = ''
      res.setEncoding('utf8')
      res.on('data', (text: string) => {
        buffer += text
        let end: number
        while ((end = buffer.indexOf('\n\n')) !== -1) {
          const event = buffer.slice(0, end)
          buffer = buffer.slice(end + 2)
          if (first === 0 && event.includes('"content":"') && !event.includes('"content":""')) first = performance.now()
          if (event.includes('"usage":{')) tokens = (JSON.parse(event.slice(6)) as { usage: { completion_tokens: number } }).usage.completion_tokens
        }
      })
      res.on('end', () => { resolve({ ttftMs: first - started, tokens, seconds: (performance.now() - started) / 1000 }) })
      res.on('error', reject)
    })
    req.on('error', reject)
    req.end(body)
  })
}

// One worker serves every run of a benchmark shape, so its own start-up (and the first connection) is paid once.
parentPort?.on('message', (job: Job) => {
  const started = performance.now()
  Promise.all(Array.from({ length: job.streams }, () => one(job, started))).then((samples) => {
    parentPort?.postMessage({ samples, wallSeconds: (performance.now() - started) / 1000 })
  }, (err: unknown) => { throw err })
})
