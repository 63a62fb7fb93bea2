// The real HTTP app (guards, error mapper, routes) on a real SQLite file, without a node around it: for tests of the
// HTTP edge that need to give it a part the node would not (a failing snapshot, a missing dashboard build).
import { join } from 'node:path'
import type { TestContext } from 'node:test'
import { buildHttpApp, type HttpDeps } from '../../src/http/app.ts'
import type { HttpApp } from '../../src/http/types.ts'
import { LocalEngine, LocalRouter } from '../../src/inference/index.ts'
import { ApiKeys, Sessions } from '../../src/keys/index.ts'
import { createLogger } from '../../src/log.ts'
import { MetricsRegistry } from '../../src/metrics/index.ts'
import { SettingsStore } from '../../src/settings/index.ts'
import { openDatabase } from '../../src/store/index.ts'
import { tempDir } from './node.ts'

/** Builds the app with silent logs and no model; `overrides` replace any dependency. Closed in t.after. */
export async function bareHttpApp (t: TestContext, overrides: Partial<HttpDeps> = {}): Promise<HttpApp> {
  const db = openDatabase(join(await tempDir(t), 'meshnode.db'))
  t.after(() => { db.close() })
  const keys = new ApiKeys({ db }, { adminToken: 'x'.repeat(43) })
  const app = await buildHttpApp({
    log: createLogger('silent'),
    settings: new SettingsStore({ db }),
    keys,
    sessions: new Sessions({ keys }),
    metrics: new MetricsRegistry(),
    health: () => ({ status: 'ok', version: '0', nodeID: 'n', uptimeSeconds: 0 }),
    snapshot: () => { throw new Error('no snapshot in a bare app') },
    router: new LocalRouter({ engine: new LocalEngine({}), sameModel: (a, b) => a === b }),
    ...overrides
  }, { version: '0', allowedHosts: [], allowedOrigins: [] })
  t.after(() => app.close())
  return app
}
