import { test } from 'node:test'
import assert from 'node:assert/strict'
import { execFile } from 'node:child_process'
import { writeFile } from 'node:fs/promises'
import { createRequire } from 'node:module'
import { join } from 'node:path'
import { promisify } from 'node:util'
import { DEFAULT_SETTINGS } from '../../src/settings/index.ts'
import { startTestNode, tempDir } from '../support/node.ts'

const run = promisify(execFile)

/** The redocly CLI of our devDependencies, or null when it is not installed (e.g. a production install). */
function redoclyCli (): string | null {
  try {
    return createRequire(import.meta.url).resolve('@redocly/cli/bin/cli.js')
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'MODULE_NOT_FOUND') return null
    throw err
  }
}

test('the OpenAPI document documents every settings key, with its type', async (t) => {
  const { api } = await startTestNode(t)
  const document = (await api.get('/openapi.json')).body
  const body = document.paths['/v1/app/settings'].patch.requestBody.content['application/json'].schema
  assert.deepEqual(Object.keys(body.properties).sort(), Object.keys(DEFAULT_SETTINGS).sort())
  for (const [key, schema] of Object.entries(body.properties as Record<string, { type?: string, enum?: unknown[], description?: string }>)) {
    assert.ok(schema.type != null || schema.enum != null, `${key} has a type`)
    assert.ok((schema.description ?? '') !== '', `${key} is described`)
  }
  assert.equal(body.additionalProperties, false, 'unknown keys are refused, and the document says so')
})

test('the OpenAPI document passes `redocly lint` with the recommended rules: no errors', async (t) => {
  const cli = redoclyCli()
  if (cli == null) {
    t.skip('@redocly/cli is not installed (it is a devDependency: run npm install)')
    return
  }
  const { api } = await startTestNode(t)
  const path = join(await tempDir(t), 'openapi.json')
  await writeFile(path, JSON.stringify((await api.get('/openapi.json')).body))
  // No telemetry and no update check: the test talks to nothing beyond this machine.
  const env = { ...process.env, REDOCLY_TELEMETRY: 'off', REDOCLY_SUPPRESS_UPDATE_NOTICE: 'true' }
  const { stdout } = await run(process.execPath, [cli, 'lint', '--extends', 'recommended', '--format', 'json', path], { env, maxBuffer: 64 * 1024 * 1024 })
    .catch((err: { stdout?: string }) => ({ stdout: err.stdout ?? '' })) // exits 1 when it finds errors: the report says which
  const report = JSON.parse(stdout) as { totals: { errors: number }, problems: Array<{ ruleId: string, severity: string, message: string, location: Array<{ pointer: string }> }> }
  const errors = report.problems.filter((p) => p.severity === 'error').map((p) => `${p.ruleId} at ${p.location[0]?.pointer}: ${p.message}`)
  assert.deepEqual(errors, [])
  assert.equal(report.totals.errors, 0)
})
