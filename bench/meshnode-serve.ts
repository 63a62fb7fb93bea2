// Child process of bench:llama-server: a whole meshnode (startNode, everything it builds) with one GGUF loaded by path,
// on its own so that its memory is measured on its own. Prints `{"url": ...}` once it serves.
import { mkdtemp } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { defaultConfig } from '../src/config.ts'
import { startNode } from '../src/node.ts'

const [modelPath, slots, contextSize] = process.argv.slice(2)
const dataDir = await mkdtemp(join(tmpdir(), 'meshnode-bench-node-'))
const node = await startNode(defaultConfig({
  port: 0, dataDir, logLevel: 'warn', threads: 1, slots: Number(slots), contextSize: Number(contextSize)
}))
await node.engine.load('bench', modelPath)
console.log(JSON.stringify({ url: node.url }))
process.on('SIGTERM', () => { node.close().then(() => process.exit(0), () => process.exit(1)) })
