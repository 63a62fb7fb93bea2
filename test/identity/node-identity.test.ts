import { test } from 'node:test'
import assert from 'node:assert/strict'
import { mkdir, readFile, readdir, rename, rm, stat, writeFile } from 'node:fs/promises'
import { existsSync } from 'node:fs'
import { join } from 'node:path'
import { startNode } from '../../src/node.ts'
import { defaultConfig } from '../../src/config.ts'
import { CorruptStateError } from '../../src/errors.ts'
import { runCli } from '../support/cli.ts'
import { spawnNodeProcess, startTestNode, tempDir } from '../support/node.ts'

const DB_FILES = ['meshnode.db', 'meshnode.db-wal', 'meshnode.db-shm']

function config (dataDir: string, resetIdentity = false): ReturnType<typeof defaultConfig> {
  return defaultConfig({ port: 0, dataDir, logLevel: 'silent', threads: 1, resetIdentity })
}

/** A node that has lived: a key, an API key in its database; closed, so its files can be tampered with. */
async function usedDataDir (t: Parameters<typeof startTestNode>[0]): Promise<{ dataDir: string, nodeID: string, keyID: string }> {
  const first = await startTestNode(t)
  const keyID = (await first.api.post('/v1/app/apikeys', { name: 'precious' })).body.id as string
  await first.node.close()
  return { dataDir: first.dataDir, nodeID: first.nodeID, keyID }
}

async function snapshot (dir: string): Promise<Record<string, string>> {
  const files: Record<string, string> = {}
  for (const name of await readdir(dir)) {
    const path = join(dir, name)
    if ((await stat(path)).isFile()) files[name] = (await readFile(path)).toString('base64')
  }
  return files
}

test('a missing node.key beside a database: start-up refuses, names the file, says what to restore, changes nothing', async (t) => {
  const { dataDir } = await usedDataDir(t)
  await rm(join(dataDir, 'node.key'))
  const before = await snapshot(dataDir)
  await assert.rejects(startNode(config(dataDir)), (err: Error) => {
    assert.ok(err instanceof CorruptStateError)
    assert.match(err.message, /node\.key is missing/)
    assert.match(err.message, /meshnode\.db/)
    assert.match(err.message, /Restore node\.key/)
    assert.match(err.message, /--reset-identity/)
    return true
  })
  const after = await snapshot(dataDir)
  delete after['admin-token']
  delete before['admin-token']
  assert.deepEqual(after, before, 'no key was made, the database is untouched')
})

test('a missing or empty meshnode.db beside a node.key: start-up refuses, names the file, creates no database', async (t) => {
  const { dataDir } = await usedDataDir(t)
  for (const file of DB_FILES) await rm(join(dataDir, file), { force: true })
  await assert.rejects(startNode(config(dataDir)), (err: Error) => {
    assert.ok(err instanceof CorruptStateError)
    assert.match(err.message, /meshnode\.db is missing or empty/)
    assert.match(err.message, /Restore meshnode\.db/)
    return true
  })
  assert.equal(existsSync(join(dataDir, 'meshnode.db')), false, 'no fresh database was created')

  await writeFile(join(dataDir, 'meshnode.db'), '')
  await assert.rejects(startNode(config(dataDir)), /meshnode\.db is missing or empty/)
  assert.equal((await stat(join(dataDir, 'meshnode.db'))).size, 0)
})

test('PTN CA keys without node.key or database: refused, naming ptn/', async (t) => {
  const dataDir = await tempDir(t)
  await mkdir(join(dataDir, 'ptn'))
  await writeFile(join(dataDir, 'ptn', `${'ab'.repeat(32)}.key`), 'a CA key')
  await assert.rejects(startNode(config(dataDir)), (err: Error) => {
    assert.match(err.message, /node\.key is missing, but ptn\//)
    return true
  })
  assert.equal(existsSync(join(dataDir, 'node.key')), false)
})

test('the node.key of another node beside a database: refused, naming both nodeIDs', async (t) => {
  const { dataDir, nodeID } = await usedDataDir(t)
  const other = await startTestNode(t)
  await other.node.close()
  await writeFile(join(dataDir, 'node.key'), await readFile(join(other.dataDir, 'node.key')))
  await assert.rejects(startNode(config(dataDir)), (err: Error) => {
    assert.ok(err instanceof CorruptStateError)
    assert.match(err.message, new RegExp(`belongs to node ${nodeID}, but node\\.key is node ${other.nodeID}`))
    return true
  })
})

test('--reset-identity: a new key on the old data, or a fresh database for the old key; later starts are normal', async (t) => {
  const { dataDir, nodeID, keyID } = await usedDataDir(t)
  await rm(join(dataDir, 'node.key'))
  const renewed = await startNode(config(dataDir, true))
  assert.notEqual(renewed.identity.nodeID, nodeID)
  const keys = await (await fetch(`${renewed.url}/v1/app/apikeys`)).json() as { keys: Array<{ id: string }> }
  assert.deepEqual(keys.keys.map((k) => k.id), [keyID], 'the database was kept')
  await renewed.close()
  const again = await startNode(config(dataDir))
  assert.equal(again.identity.nodeID, renewed.identity.nodeID)
  await again.close()

  for (const file of DB_FILES) await rm(join(dataDir, file), { force: true })
  const fresh = await startNode(config(dataDir, true))
  t.after(() => fresh.close())
  assert.equal(fresh.identity.nodeID, renewed.identity.nodeID, 'the key was kept')
  const none = await (await fetch(`${fresh.url}/v1/app/apikeys`)).json() as { keys: unknown[] }
  assert.deepEqual(none.keys, [])
})

test('a first start cut short after recording its key is finished by the next start, with the same identity', async (t) => {
  const { dataDir, nodeID } = await usedDataDir(t)
  // What a crash between recording the new key in the database and writing node.key leaves behind.
  await rename(join(dataDir, 'node.key'), join(dataDir, 'node.key.new'))
  const node = await startNode(config(dataDir))
  t.after(() => node.close())
  assert.equal(node.identity.nodeID, nodeID)
  assert.ok(existsSync(join(dataDir, 'node.key')))
  assert.equal(existsSync(join(dataDir, 'node.key.new')), false)
})

test('meshnode serve: refuses with exit code 1 and the message; --reset-identity starts', async (t) => {
  const { dataDir } = await usedDataDir(t)
  await rm(join(dataDir, 'node.key'))
  const refused = await runCli(['serve', '--port', '0', '--data-dir', dataDir])
  assert.equal(refused.code, 1)
  assert.match(refused.stderr, /cannot start: .*node\.key is missing.*Restore node\.key/)
  const started = await spawnNodeProcess(t, ['--data-dir', dataDir, '--reset-identity'])
  const health = await (await fetch(`${started.url}/health`)).json() as { status: string }
  assert.equal(health.status, 'ok')
})
