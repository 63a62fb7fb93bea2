// The wallet's HTTP surface on one real node: shapes, defaults, and every bad input refused with nothing changed.
import assert from 'node:assert/strict'
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { test, type TestContext } from 'node:test'
import { startTestNode, type Api } from '../support/node.ts'

const UNKNOWN_PEER = 'ab'.repeat(32)

/** Everything a refused request must leave as it was. */
async function walletState (api: Api): Promise<unknown> {
  const [summary, list] = await Promise.all([api.get('/v1/app/wallet'), api.get('/v1/app/wallet/transactions?limit=500')])
  return { summary: summary.body, transactions: list.body }
}

test('a new node: 100 credits granted once, the summary, the list and the snapshot agree', async (t) => {
  const node = await startTestNode(t)
  const summary = await node.api.get('/v1/app/wallet')
  assert.equal(summary.status, 200)
  assert.deepEqual(summary.body, { currentBalance: 100, totalEarned: 0, totalSpent: 0, transactionCount: 1, pendingTransfers: 0 })
  const list = await node.api.get('/v1/app/wallet/transactions')
  assert.equal(list.status, 200)
  assert.equal(list.body.transactions.length, 1)
  const [grant] = list.body.transactions
  assert.deepEqual(Object.keys(grant).sort(), ['amount', 'id', 'memo', 'peerID', 'timestamp', 'type'])
  assert.deepEqual({ type: grant.type, amount: grant.amount, peerID: grant.peerID }, { type: 'grant', amount: 100, peerID: null })
  assert.match(grant.timestamp, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/)
  assert.equal((await node.api.get('/v1/app')).body.wallet.currentBalance, 100)

  const restarted = await node.restart()
  assert.deepEqual((await restarted.api.get('/v1/app/wallet')).body, summary.body, 'no second grant after a restart')
})

test('transactions: limit defaults to 20, accepts 1 to 500, refuses anything else with 400', async (t) => {
  const { api } = await startTestNode(t)
  for (const limit of ['1', '500', '20']) {
    const res = await api.get(`/v1/app/wallet/transactions?limit=${limit}`)
    assert.equal(res.status, 200, limit)
  }
  for (const limit of ['0', '501', '-1', '1.5', 'abc', '', '1e9', '0x10', '1e2', '%2B5', '%205', '5.0', '0b11', '9'.repeat(20)]) {
    const res = await api.get(`/v1/app/wallet/transactions?limit=${limit}`)
    assert.equal(res.status, 400, `limit=${limit}`)
    assert.equal(res.body.error.type, 'invalid_request_error')
    assert.equal(res.body.error.param, 'limit', `limit=${limit}`)
  }
  const twice = await api.get('/v1/app/wallet/transactions?limit=1&limit=2')
  assert.equal(twice.status, 400)
})

test('send refuses bad amounts, peers and memos with the right status, and changes nothing', async (t) => {
  const node = await startTestNode(t)
  const before = await walletState(node.api)
  const cases: Array<[string, unknown, number, string | null]> = [
    ['missing amount', { peerID: UNKNOWN_PEER }, 400, 'amount'],
    ['missing peerID', { amount: 1 }, 400, 'peerID'],
    ['amount as string', { amount: '1', peerID: UNKNOWN_PEER }, 400, 'amount'],
    ['amount null', { amount: null, peerID: UNKNOWN_PEER }, 400, 'amount'],
    ['zero', { amount: 0, peerID: UNKNOWN_PEER }, 400, 'amount'],
    ['negative', { amount: -1, peerID: UNKNOWN_PEER }, 400, 'amount'],
    ['too precise', { amount: 0.0000001, peerID: UNKNOWN_PEER }, 400, 'amount'],
    ['seven decimals', { amount: 1.2345678, peerID: UNKNOWN_PEER }, 400, 'amount'],
    ['oversized', { amount: 1e10, peerID: UNKNOWN_PEER }, 400, 'amount'],
    ['peerID as number', { amount: 1, peerID: 5 }, 400, 'peerID'],
    ['peerID empty', { amount: 1, peerID: '' }, 400, 'peerID'],
    ['peerID not a nodeID', { amount: 1, peerID: 'bob' }, 400, 'peerID'],
    ['to itself', { amount: 1, peerID: node.nodeID }, 400, 'peerID'],
    ['memo too long', { amount: 1, peerID: UNKNOWN_PEER, memo: 'x'.repeat(257) }, 400, 'memo'],
    ['memo as number', { amount: 1, peerID: UNKNOWN_PEER, memo: 7 }, 400, 'memo'],
    ['unknown peer', { amount: 1, peerID: UNKNOWN_PEER }, 404, null],
    ['unknown peer by peer_id', { amount: 1, peer_id: UNKNOWN_PEER }, 404, null],
    ['unknown peer, above the balance', { amount: 1000, peerID: UNKNOWN_PEER }, 404, null]
  ]
  for (const [what, body, status, param] of cases) {
    const res = await node.api.post('/v1/app/wallet/send', body)
    assert.equal(res.status, status, `${what}: ${JSON.stringify(res.body)}`)
    if (status === 400) {
      assert.equal(res.body.error.type, 'invalid_request_error', what)
      assert.equal(res.body.error.param, param, what)
    } else {
      assert.equal(res.body.error.type, 'not_found', what)
      assert.match(res.body.error.message, new RegExp(UNKNOWN_PEER), what)
    }
  }
  // JSON cannot say Infinity, but 1e999 parses to it: non-finite amounts are refused too.
  const infinite = await node.api.send('POST', '/v1/app/wallet/send', `{"amount":1e999,"peerID":"${UNKNOWN_PEER}"}`, { 'content-type': 'application/json' })
  assert.equal(infinite.status, 400)
  assert.equal(infinite.body.error.param, 'amount')
  const malformed = await node.api.send('POST', '/v1/app/wallet/send', '{"amount":', { 'content-type': 'application/json' })
  assert.equal(malformed.status, 400)
  assert.deepEqual(await walletState(node.api), before)
})

test('the OpenAPI document lists the wallet routes with their answers', async (t) => {
  const { api } = await startTestNode(t)
  const doc = (await api.get('/openapi.json')).body
  for (const path of ['/v1/app/wallet', '/v1/app/wallet/transactions', '/v1/app/wallet/send', '/v1/app/wallet/solana', '/v1/app/wallet/chain']) {
    assert.ok(path in doc.paths, path)
  }
  assert.ok('402' in doc.paths['/v1/app/wallet/send'].post.responses)
})

/** A local Solana JSON-RPC endpoint that answers getBalance from a table of lamports by address. */
async function startFakeSolana (t: TestContext, lamports: Record<string, number>): Promise<{ url: string, calls: string[] }> {
  const calls: string[] = []
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    let text = ''
    req.on('data', (chunk: Buffer) => { text += chunk.toString() })
    req.on('end', () => {
      const call = JSON.parse(text) as { id: number, method: string, params: [string, unknown?] }
      calls.push(call.method)
      const body = call.method === 'getBalance'
        ? { jsonrpc: '2.0', id: call.id, result: { context: { slot: 1 }, value: lamports[call.params[0]] ?? 0 } }
        : { jsonrpc: '2.0', id: call.id, error: { code: -32601, message: 'Method not found' } }
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(body))
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.after(() => new Promise<void>((resolve) => { server.close(() => { resolve() }); server.closeAllConnections() }))
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, calls }
}

/** Base58 (Bitcoin alphabet), written out here so the test does not check the node against its own library. */
function base58 (bytes: Uint8Array): string {
  const alphabet = '123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz'
  let n = BigInt('0x' + Buffer.from(bytes).toString('hex'))
  let out = ''
  while (n > 0n) { out = alphabet[Number(n % 58n)] + out; n /= 58n }
  for (const byte of bytes) { if (byte !== 0) break; out = '1' + out }
  return out
}

test('solana: the address is the node key in base58, the balance comes from getBalance, and /chain is the same', async (t) => {
  const node = await startTestNode(t)
  const address = base58(node.node.identity.publicKey)
  const rpc = await startFakeSolana(t, { [address]: 2_500_000_000 })
  assert.equal((await node.api.patch('/v1/app/settings', { solana_rpc_url: rpc.url })).status, 200)
  for (const path of ['/v1/app/wallet/solana', '/v1/app/wallet/chain']) {
    const res = await node.api.get(path)
    assert.equal(res.status, 200)
    assert.deepEqual(res.body, { address, balance: 2.5, status: 'connected' })
  }
  assert.deepEqual(rpc.calls, ['getBalance', 'getBalance'])
})

test('solana: an unreachable or failing endpoint is status disconnected with a null balance, never an error', async (t) => {
  const node = await startTestNode(t)
  const address = base58(node.node.identity.publicKey)
  assert.equal((await node.api.get('/v1/app')).body.settings.solana_rpc_url, 'https://api.mainnet-beta.solana.com')

  const working = await startFakeSolana(t, {})
  const probe = createServer()
  await new Promise<void>((resolve) => probe.listen(0, '127.0.0.1', resolve))
  const closedUrl = `http://127.0.0.1:${(probe.address() as AddressInfo).port}`
  await new Promise<void>((resolve) => probe.close(() => { resolve() }))
  const failing = createServer((_req, res) => { res.writeHead(500, { 'content-type': 'text/html' }).end('<h1>oops</h1>') })
  await new Promise<void>((resolve) => failing.listen(0, '127.0.0.1', resolve))
  t.after(() => new Promise<void>((resolve) => { failing.close(() => { resolve() }) }))
  const failingUrl = `http://127.0.0.1:${(failing.address() as AddressInfo).port}`

  for (const url of [closedUrl, failingUrl]) {
    assert.equal((await node.api.patch('/v1/app/settings', { solana_rpc_url: url })).status, 200)
    const res = await node.api.get('/v1/app/wallet/solana')
    assert.equal(res.status, 200, url)
    assert.deepEqual(res.body, { address, balance: null, status: 'disconnected' }, url)
  }
  // Back up: the next call says so, no restart needed.
  assert.equal((await node.api.patch('/v1/app/settings', { solana_rpc_url: working.url })).status, 200)
  assert.deepEqual((await node.api.get('/v1/app/wallet/chain')).body, { address, balance: 0, status: 'connected' })
})
