export { Ledger, GRANT_MICRO } from './ledger.ts'
export type { WalletTransaction, WalletTotals, TransactionType, OutgoingTransfer, PendingTransfer, TransferRecord, ReceiveResult, LedgerEvents } from './ledger.ts'
export { MICRO_PER_CREDIT, creditsToMicro, microToCredits, formatCredits } from './credits.ts'
export { Wallet, DEFAULT_HOLD_TOKENS } from './wallet.ts'
export type { WalletDeps, WalletOptions, WalletNetwork, SendRequest, SendResult, CreditHold, InferenceCharge, InferenceChargeRequest, InferencePayee } from './wallet.ts'
export { TransferOutbox } from './outbox.ts'
export type { TransferOutboxDeps, TransferOutboxOptions, DeliverTransfers } from './outbox.ts'
export {
  TRANSFER_PROTOCOL, TRANSFER_DOMAIN, MAX_TRANSFER_MICRO, MAX_TRANSFER_MEMO_CHARS, MAX_TRANSFERS_PER_FRAME,
  Transfer, TransferAck, signTransfer, openTransfer, storedEnvelope, createTransferHandler, deliverTransfers
} from './transfer-protocol.ts'
export type { StoredTransfer, TransferHandlerDeps } from './transfer-protocol.ts'
export { pricePer1kTokensMicro, inferenceCostMicro, billableTokens, parameterCount, JOULES_PER_TOKEN_PER_GB, CREDITS_PER_CURRENCY_UNIT, MIN_PRICE_PER_1K_MICRO, MAX_PRICE_PER_1K_MICRO } from './pricing.ts'
export type { PricedModel, ElectricitySettings } from './pricing.ts'
export { SolanaWallet, solanaAddress, DEFAULT_SOLANA_RPC_URL } from './solana.ts'
export type { SolanaStatus, SolanaWalletDeps, SolanaWalletOptions } from './solana.ts'
