import { InvalidArgumentError, type Command } from 'commander'
import type { ChainStatus, SendResult, TransactionList, WalletSummary } from '../../http/schemas/wallet.ts'
import { formatPairs, formatTable, print } from '../output.ts'
import { clientFor, wholeNumberOption, withClientOptions } from './common.ts'

export function registerWallet (program: Command): void {
  const wallet = program.command('wallet').description('credits: balance, transactions, sends, on-chain status')

  withClientOptions(wallet.command('balance').description('show the balance and totals'))
    .action(async (_options, command: Command) => {
      const { client, options } = clientFor(command)
      const summary = await client.get<WalletSummary>('/v1/app/wallet')
      print(summary, options.json, () => formatPairs([
        ['balance', summary.currentBalance],
        ['earned', summary.totalEarned],
        ['spent', summary.totalSpent],
        ['transactions', summary.transactionCount],
        ['pending transfers', summary.pendingTransfers]
      ]))
    })

  withClientOptions(wallet.command('transactions').description('list transactions, newest first')
    .option('--limit <n>', 'how many (1 to 500)', wholeNumberOption('--limit', 1, 500), 20))
    .action(async (_options, command: Command) => {
      const { client, options } = clientFor(command)
      const limit = command.opts<{ limit: number }>().limit
      const list = await client.get<TransactionList>(`/v1/app/wallet/transactions?limit=${limit}`)
      print(list, options.json, () => list.transactions.length === 0
        ? 'No transactions.'
        : formatTable(['time', 'type', 'amount', 'peer', 'memo', 'id'],
          list.transactions.map((tx) => [tx.timestamp, tx.type, tx.amount, tx.peerID, tx.memo, tx.id])))
    })

  withClientOptions(wallet.command('send').argument('<peerID>').argument('<amount>', 'credits, up to 6 decimals', parseAmount)
    .option('--memo <text>', 'a note the peer sees')
    .description('send credits to a peer'))
    .action(async (peerID: string, amount: number, _options, command: Command) => {
      const { client, options } = clientFor(command)
      const memo = command.opts<{ memo?: string }>().memo
      const result = await client.post<SendResult>('/v1/app/wallet/send', { peerID, amount, memo })
      print(result, options.json, () => `Sent ${result.amount} credits to ${result.peerID} (transaction ${result.transactionID}). Balance: ${result.newBalance}`)
    })

  withClientOptions(wallet.command('solana').alias('chain').description('show the on-chain address and balance'))
    .action(async (_options, command: Command) => {
      const { client, options } = clientFor(command)
      const chain = await client.get<ChainStatus>('/v1/app/wallet/solana')
      print(chain, options.json, () => formatPairs([
        ['address', chain.address],
        ['balance', chain.balance == null ? null : `${chain.balance} SOL`],
        ['status', chain.status]
      ]))
    })
}

/** The node checks the amount (finite, > 0, at most 6 decimals); here only that it is a number at all. */
function parseAmount (value: string): number {
  const amount = Number(value)
  if (value.trim() === '' || Number.isNaN(amount)) throw new InvalidArgumentError('expected a number of credits, e.g. 2.5')
  return amount
}
