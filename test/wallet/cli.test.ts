// `meshnode wallet balance | transactions | send | solana` against a real node, over HTTP like any client.
import assert from 'node:assert/strict'
import { test } from 'node:test'
import { runCli as meshnode } from '../support/cli.ts'
import { startTestNode } from '../support/node.ts'

test('wallet balance, transactions, send and solana print the API answers', async (t) => {
  const { node, dataDir } = await startTestNode(t)
  // An endpoint that refuses connections: the chain status is disconnected, and the command still succeeds.
  assert.equal((await fetch(`${node.url}/v1/app/settings`, {
    method: 'PATCH', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ solana_rpc_url: 'http://127.0.0.1:9' })
  })).status, 200)
  const common = ['--url', node.url, '--data-dir', dataDir]

  // Each run starts a process that loads the whole CLI: a handful of runs covers every command.
  const balance = await meshnode(['wallet', 'balance', ...common])
  assert.equal(balance.code, 0, balance.stderr)
  assert.match(balance.stdout, /balance\s+100\n/)
  assert.match(balance.stdout, /pending transfers\s+0/)

  const list = await meshnode(['wallet', 'transactions', ...common, '--limit', '5'])
  assert.equal(list.code, 0, list.stderr)
  assert.match(list.stdout, /grant\s+100\s+-\s+welcome grant/)
  const badLimit = await meshnode(['wallet', 'transactions', ...common, '--limit', '0'])
  assert.equal(badLimit.code, 2, 'a usage error, checked before asking the node (README, Exit codes)')
  assert.match(badLimit.stderr, /--limit must be a whole number from 1 to 500, not 0/)

  const unknown = await meshnode(['wallet', 'send', 'ab'.repeat(32), '1.5', ...common, '--memo', 'thanks'])
  assert.equal(unknown.code, 1)
  assert.match(unknown.stderr, /Peer not found: (ab){32} \(HTTP 404\)/)

  const chain = await meshnode(['wallet', 'chain', ...common, '--json'])
  assert.equal(chain.code, 0, chain.stderr)
  assert.deepEqual({ ...JSON.parse(chain.stdout), address: null }, { address: null, balance: null, status: 'disconnected' })
})
