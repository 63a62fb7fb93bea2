import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod'
import { creditsToMicro, microToCredits, type SolanaWallet, type Wallet } from '../../wallet/index.ts'
import { ErrorEnvelope, errorResponses } from '../schemas/common.ts'
import {
  ChainStatus, PendingTransferList, SendBody, SendResult, TransactionList, TransactionsQuery, WalletSummary, pendingTransferBody, transactionBody
} from '../schemas/wallet.ts'

export interface WalletRoutesOptions {
  wallet: Wallet
  solana: SolanaWallet
}

export const walletRoutes: FastifyPluginAsyncZod<WalletRoutesOptions> = async (app, { wallet, solana }) => {
  const tags = ['wallet']
  const errors = { ...errorResponses, 402: ErrorEnvelope }

  app.get('/v1/app/wallet', { schema: { summary: 'Wallet summary', tags, response: { 200: WalletSummary, ...errors } } }, async () => {
    const totals = wallet.summary()
    return {
      currentBalance: microToCredits(totals.balanceMicro),
      totalEarned: microToCredits(totals.earnedMicro),
      totalSpent: microToCredits(totals.spentMicro),
      transactionCount: totals.transactionCount,
      pendingTransfers: totals.pendingTransfers
    }
  })

  app.get('/v1/app/wallet/transactions', {
    schema: { summary: 'Wallet transactions, newest first', tags, querystring: TransactionsQuery, response: { 200: TransactionList, ...errors } }
  }, async (request) => ({ transactions: wallet.transactions(request.query.limit, request.query.offset).map(transactionBody) }))

  app.get('/v1/app/wallet/pending', {
    schema: { summary: 'Transfers debited here and not yet acknowledged by their payee, oldest first', tags, querystring: TransactionsQuery, response: { 200: PendingTransferList, ...errors } }
  }, async (request) => ({ transfers: wallet.pendingTransfers(request.query.limit, request.query.offset).map(pendingTransferBody) }))

  app.post('/v1/app/wallet/send', { schema: { summary: 'Send credits to a peer', tags, body: SendBody, response: { 200: SendResult, ...errors } } }, async (request) => {
    const { amount, peerID, memo } = request.body
    const result = wallet.send({ peerID, amountMicro: creditsToMicro(amount), memo: memo ?? '' })
    return {
      transactionID: result.transactionID,
      amount: microToCredits(result.amountMicro),
      peerID: result.peerID,
      newBalance: microToCredits(result.balanceMicro)
    }
  })

  // The on-chain status answers under two names: the neutral `chain`, and `solana`, the chain the bridge targets.
  for (const url of ['/v1/app/wallet/solana', '/v1/app/wallet/chain']) {
    app.get(url, { schema: { summary: 'On-chain (Solana) address and balance', tags, response: { 200: ChainStatus, ...errors } } }, async () => await solana.status())
  }
}
