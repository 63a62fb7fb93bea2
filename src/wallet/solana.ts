import type * as SolanaKitModule from '@solana/kit'
import type { Logger } from 'pino'
import type { NodeIdentity } from '../identity/index.ts'

/** Setting `solana_rpc_url`'s default: Solana's public mainnet endpoint. */
export const DEFAULT_SOLANA_RPC_URL = 'https://api.mainnet-beta.solana.com'
const LAMPORTS_PER_SOL = 1_000_000_000

/** The on-chain status of the node's address. `balance` is SOL, null when the endpoint did not answer. */
export interface SolanaStatus {
  address: string
  balance: number | null
  status: 'connected' | 'disconnected'
}

export interface SolanaWalletDeps {
  identity: NodeIdentity
  /** The configured endpoint, read at every call so a settings change applies at once. */
  rpcUrl: () => string
  log: Logger
}

export interface SolanaWalletOptions {
  /** Deadline of one getBalance call; past it the status is `disconnected`. @default 5_000 */
  timeoutMs?: number
}

// @solana/kit is loaded on first use, not at every node start: a node that never asks Solana does not pay for its
// import (bench/README.md).
type SolanaKit = typeof SolanaKitModule
let kit: Promise<SolanaKit> | null = null
async function loadKit (): Promise<SolanaKit> {
  kit ??= import('@solana/kit')
  return await kit
}

/** The node's on-chain address: its Ed25519 public key, base58-encoded as Solana writes addresses. */
export async function solanaAddress (identity: NodeIdentity): Promise<string> {
  const { getAddressDecoder } = await loadKit()
  return getAddressDecoder().decode(identity.publicKey)
}

/**
 * The bridged on-chain wallet's status: the node's address and its SOL balance, asked of the configured JSON-RPC
 * endpoint with `getBalance`. An unreachable, slow or failing endpoint is `disconnected` with a null balance,
 * never an error: the chain being down is not the caller's fault.
 */
export class SolanaWallet {
  readonly #identity: NodeIdentity
  readonly #rpcUrl: () => string
  readonly #log: Logger
  readonly #timeoutMs: number

  constructor (deps: SolanaWalletDeps, options: SolanaWalletOptions = {}) {
    this.#identity = deps.identity
    this.#rpcUrl = deps.rpcUrl
    this.#log = deps.log
    this.#timeoutMs = options.timeoutMs ?? 5_000
  }

  async status (options: { signal?: AbortSignal } = {}): Promise<SolanaStatus> {
    const { createSolanaRpc, getAddressDecoder } = await loadKit()
    const address = getAddressDecoder().decode(this.#identity.publicKey)
    const url = this.#rpcUrl()
    const deadline = AbortSignal.timeout(this.#timeoutMs)
    try {
      const { value: lamports } = await createSolanaRpc(url).getBalance(address).send({
        abortSignal: options.signal == null ? deadline : AbortSignal.any([deadline, options.signal])
      })
      return { address, balance: Number(lamports) / LAMPORTS_PER_SOL, status: 'connected' }
    } catch (err) {
      // Expected: the endpoint is unreachable, slow, or answered with a JSON-RPC error or a non-JSON page.
      // The status says so; the log says why.
      this.#log.info({ url, reason: err instanceof Error ? err.message : String(err) }, 'Solana RPC did not answer getBalance')
      return { address, balance: null, status: 'disconnected' }
    }
  }
}
