// The transfer outbox and the transfer protocol between two real wallets (each its own SQLite file), joined by
// in-memory stream pairs instead of libp2p: deliveries, refusals, backoff and database faults in milliseconds.
import assert from 'node:assert/strict'
import { join } from 'node:path'
import { Writable } from 'node:stream'
import { test, type TestContext } from 'node:test'
import type { Stream } from '@libp2p/interface'
import { streamPair } from '@libp2p/utils'
import { generateSeed, identityFromSeed, type NodeIdentity } from '../../src/identity/index.ts'
import { createLogger } from '../../src/log.ts'
import { openDatabase, type Database } from '../../src/store/index.ts'
import { Ledger, TRANSFER_PROTOCOL, Wallet, type WalletNetwork } from '../../src/wallet/index.ts'
import { TransferRequest } from '../../src/wallet/transfer-protocol.ts'
import { serveRequest } from '../../src/wire/index.ts'
import { tempDir, waitFor } from '../support/node.ts'

interface TestWallet {
  identity: NodeIdentity
  db: Database
  ledger: Ledger
  wallet: Wallet
  /** Log lines at warn and above, as JSON. */
  problems: Array<{ msg: string, level: number }>
  /** Called for every transfer batch the wallet receives; the default serves it with the wallet's own handler. */
  serve: (stream: Stream, from: string) => Promise<void>
}

/**
 * Two or more wallets that reach each other over stream pairs: `open(nodeID, protocol)` hands the other end of a new
 * pair to the handler the target registered, as the network would, with the asking wallet's nodeID.
 */
async function startWallets (t: TestContext, count: number, options: { maxRetryMs?: number } = {}): Promise<TestWallet[]> {
  const wallets: TestWallet[] = []
  for (let i = 0; i < count; i++) {
    const identity = identityFromSeed(generateSeed())
    const db = openDatabase(join(await tempDir(t), 'meshnode.db'))
    const problems: TestWallet['problems'] = []
    const log = createLogger('warn', new Writable({ write (chunk, _encoding, done) { problems.push(JSON.parse(String(chunk))); done() } }))
    const ledger = new Ledger({ db })
    let handler: ((stream: Stream, peer: { nodeID: string }) => Promise<void>) | null = null
    const network: WalletNetwork = {
      handle: async (protocol, registered) => {
        assert.equal(protocol, TRANSFER_PROTOCOL)
        handler = registered
      },
      open: async (nodeID, protocol) => {
        assert.equal(protocol, TRANSFER_PROTOCOL)
        const target = wallets.find((w) => w.identity.nodeID === nodeID)
        if (target == null) throw new Error(`no wallet ${nodeID}`)
        const [outbound, inbound] = await streamPair()
        void target.serve(inbound, identity.nodeID).catch((err: unknown) => { inbound.abort(err instanceof Error ? err : new Error(String(err))) })
        return outbound
      },
      isKnownPeer: (nodeID) => wallets.some((w) => w.identity.nodeID === nodeID)
    }
    const wallet = new Wallet({ ledger, identity, network, log }, { minRetryMs: 20, maxRetryMs: options.maxRetryMs ?? 200 })
    await wallet.start()
    const entry: TestWallet = { identity, db, ledger, wallet, problems, serve: async (stream, from) => { await handler?.(stream, { nodeID: from }) } }
    wallets.push(entry)
    t.after(async () => { await wallet.stop(); db.close() })
  }
  return wallets
}

test('a send is delivered over the transfer protocol and acknowledged once; the payee credits it once', async (t) => {
  const [alice, bob] = await startWallets(t, 2)
  const sent = alice.wallet.send({ peerID: bob.identity.nodeID, amountMicro: 1_500_000, memo: 'lunch' })
  await waitFor(() => alice.wallet.summary().pendingTransfers === 0, { what: 'the transfer acknowledged' })
  assert.equal(bob.wallet.balanceMicro(), 101_500_000)
  const earned = bob.wallet.transactions(10)[0]
  assert.deepEqual([earned.id, earned.type, earned.amountMicro, earned.peerID, earned.memo], [sent.transactionID, 'earn', 1_500_000, alice.identity.nodeID, 'lunch'])
  assert.deepEqual(alice.problems, [])
})

test('a database error in the outbox worker is logged and retried; the transfer is delivered once the database writes again', async (t) => {
  const [alice, bob] = await startWallets(t, 2)
  // Writes fail from now on (a full disk looks the same to the outbox): the send below is already committed.
  alice.wallet.send({ peerID: bob.identity.nodeID, amountMicro: 2_000_000 })
  alice.db.exec('PRAGMA query_only = 1')
  await waitFor(() => alice.problems.filter((line) => line.msg === 'the transfer outbox failed; retrying').length >= 2, { what: 'the outbox to fail and retry' })
  // Bob applied it; Alice could not record the acknowledgement, so for her it is still pending, and she sends it again.
  assert.equal(bob.wallet.balanceMicro(), 102_000_000)
  assert.equal(alice.wallet.summary().pendingTransfers, 1)
  alice.db.exec('PRAGMA query_only = 0')
  await waitFor(() => alice.wallet.summary().pendingTransfers === 0, { what: 'the acknowledgement recorded' })
  assert.equal(bob.wallet.balanceMicro(), 102_000_000, 'applied once, however often it was delivered')
  assert.equal(alice.wallet.balanceMicro(), 98_000_000)
})

test('a refused transfer waits out its backoff: sends to the same payee and its coming online are the only early retries', async (t) => {
  const [alice, bob] = await startWallets(t, 2, { maxRetryMs: 60_000 })
  const deliveries: number[] = []
  const honest = bob.serve
  // Bob runs other code: he refuses every transfer (well-formed acks, status `refused`).
  bob.serve = async (stream) => {
    deliveries.push(Date.now())
    await serveRequest(stream, TransferRequest, (request) => ({ acks: request.transfers.map((envelope) => ({ id: (envelope as { body: { id: string } }).body.id, status: 'refused', reason: 'not today' })) }), { maxRequestBytes: 128 * 1024, timeoutMs: 5_000 })
  }
  alice.wallet.send({ peerID: bob.identity.nodeID, amountMicro: 1_000_000 })
  await waitFor(() => deliveries.length === 1 && alice.problems.some((line) => line.msg === 'payee did not accept a transfer; will retry'), { what: 'the refusal' })
  // Its retry is 60 s away. A second send to Bob goes out at once, alone: the refused one is not due yet.
  alice.wallet.send({ peerID: bob.identity.nodeID, amountMicro: 1_000_000 })
  await waitFor(() => deliveries.length === 2, { what: 'the second send delivered' })
  assert.equal(alice.wallet.summary().pendingTransfers, 2)
  // Bob comes back online (upgraded): both go out now, and are acknowledged.
  bob.serve = honest
  alice.wallet.peerOnline(bob.identity.nodeID)
  await waitFor(() => alice.wallet.summary().pendingTransfers === 0, { what: 'both delivered after Bob came online' })
  assert.equal(bob.wallet.balanceMicro(), 102_000_000)
})
