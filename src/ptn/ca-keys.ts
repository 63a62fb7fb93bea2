import { chmodSync, mkdirSync, readFileSync, rmSync } from 'node:fs'
import { join } from 'node:path'
import { CorruptStateError } from '../errors.ts'
import { HEX_32_BYTES, identityFromSeed, type NodeIdentity } from '../identity/index.ts'
import { writeFileAtomic } from '../store/index.ts'
import { CaKeyMismatchError } from './errors.ts'

const CA_KEY_FILE_VERSION = 'meshnode-ptn-ca-ed25519-v1'

/**
 * The CA keys this node holds, one file per PTN: `<dir>/<ptnID>.key`, mode 0600 in a 0700 directory, written
 * atomically. A key never leaves this class except as the signer it builds and, for promote-admin, as hex handed
 * straight to the encrypted peer stream; it is never logged and never part of an HTTP answer.
 */
export class CaKeyStore {
  readonly #dir: string

  constructor (options: { dir: string }) {
    this.#dir = options.dir
  }

  /** The CA of `ptnID`, or null when this node does not hold its key. */
  load (ptnID: string): NodeIdentity | null {
    let text: string
    try {
      text = readFileSync(this.#path(ptnID), 'utf8')
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null
      throw err
    }
    const [version, hex] = text.trim().split('\n')
    if (version !== CA_KEY_FILE_VERSION || hex == null || !HEX_32_BYTES.test(hex)) {
      throw new CorruptStateError(`CA key file of PTN ${ptnID} is unreadable; import the key again with import-ca-key`)
    }
    const ca = identityFromSeed(new Uint8Array(Buffer.from(hex, 'hex')))
    if (ca.nodeID !== ptnID) throw new CorruptStateError(`CA key file of PTN ${ptnID} holds the key of another PTN`)
    return ca
  }

  has (ptnID: string): boolean {
    return this.load(ptnID) != null
  }

  save (ca: NodeIdentity): void {
    mkdirSync(this.#dir, { recursive: true, mode: 0o700 })
    chmodSync(this.#dir, 0o700)
    writeFileAtomic(this.#path(ca.nodeID), `${CA_KEY_FILE_VERSION}\n${Buffer.from(ca.seed).toString('hex')}\n`, 0o600)
  }

  remove (ptnID: string): void {
    rmSync(this.#path(ptnID), { force: true })
  }

  #path (ptnID: string): string {
    // ptnID is checked at every edge already; this keeps a path outside the directory impossible regardless.
    if (!HEX_32_BYTES.test(ptnID)) throw new Error(`Not a ptnID: ${ptnID.slice(0, 80)}`)
    return join(this.#dir, `${ptnID}.key`)
  }
}

/** Hex of the CA seed as promote-admin sends it; the caller sends it only over an encrypted peer stream. */
export function caKeyHex (ca: NodeIdentity): string {
  return Buffer.from(ca.seed).toString('hex')
}

/**
 * The CA for `ptnID` from a hex private key: the 32-byte seed, or libp2p's 64-byte form (seed then public key).
 * Throws `CaKeyMismatchError` when it is not the key of that PTN.
 */
export function caFromHex (hex: string, ptnID: string): NodeIdentity {
  const normalized = hex.trim().toLowerCase()
  if (!/^([0-9a-f]{64}|[0-9a-f]{128})$/.test(normalized)) {
    throw new CaKeyMismatchError('caKeyHex must be a hex Ed25519 private key (64 hex characters, or 128 with the public key)')
  }
  const ca = identityFromSeed(new Uint8Array(Buffer.from(normalized.slice(0, 64), 'hex')))
  if (normalized.length === 128 && normalized.slice(64) !== ca.nodeID) {
    throw new CaKeyMismatchError('caKeyHex: its public half does not match its private half')
  }
  if (ca.nodeID !== ptnID) throw new CaKeyMismatchError(`caKeyHex is not the CA key of PTN ${ptnID}`)
  return ca
}
