// The `meshnode` entry point. Node's compile cache keeps the type-stripped, compiled modules between runs, which
// roughly halves start-up of the CLI and of `meshnode serve`; it must be enabled before anything else is imported.
import module from 'node:module'

module.enableCompileCache?.()
const { run } = await import('./program.ts')
await run(process.argv)
