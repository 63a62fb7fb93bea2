// The baseline for bench:http: a bare node:http server answering what GET /health answers, with nothing else.
import { createServer } from 'node:http'

const body = JSON.stringify({ status: 'ok', version: '0.1.0', nodeID: '0'.repeat(64), uptimeSeconds: 0 })
const server = createServer((_req, res) => {
  res.writeHead(200, { 'content-type': 'application/json; charset=utf-8', 'content-length': Buffer.byteLength(body) })
  res.end(body)
})
server.listen(0, '127.0.0.1', () => {
  const address = server.address()
  process.stdout.write(JSON.stringify({ port: typeof address === 'object' && address != null ? address.port : 0 }) + '\n')
})
process.on('SIGTERM', () => { server.close(); server.closeAllConnections() })
