// Loaded into every test process by `npm test` (`--import`): Node's compile cache, as the CLI enables it, so that
// the suite's ~90 test processes compile src/ and its dependencies once instead of each again at its start.
import module from 'node:module'

module.enableCompileCache?.()
