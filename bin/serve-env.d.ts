/** What `meshnode serve` adds to `env` before the node starts (see serve-env.js). */
export function serveEnvironment (env: NodeJS.ProcessEnv): Record<string, string>
