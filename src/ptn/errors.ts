import { InvalidInputError } from '../errors.ts'

/**
 * Why a certificate was not accepted. Every reason is a 400 at the HTTP edge (an invalid field), with
 * `param` naming the field that carried it, and nothing changes.
 * - `malformed`: not base64url JSON of `{payload, signature}` of the right shape
 * - `bad_signature`: the signature does not verify against the `ptnID` (the CA public key)
 * - `expired`: `expiresAt` has passed
 * - `not_yet_valid`: `issuedAt` lies in the future beyond the allowed clock skew
 * - `wrong_node`: issued for another nodeID than the one presenting it
 * - `wrong_ptn`: issued for another PTN than the one asked about
 * - `wrong_role`: a role other than the one the step requires (an admin certificate for promote-admin)
 */
export type CertificateRejection = 'malformed' | 'bad_signature' | 'expired' | 'not_yet_valid' | 'wrong_node' | 'wrong_ptn' | 'wrong_role'

export class InvalidCertificateError extends InvalidInputError {
  override name = 'InvalidCertificateError'
  readonly reason: CertificateRejection
  constructor (message: string, reason: CertificateRejection, param = 'certData') {
    super(message, param)
    this.reason = reason
  }
}

/**
 * Why an invite code was not accepted (400, `param: inviteCode`).
 * - `malformed`, `bad_signature`, `expired`: as for certificates
 * - `used`: the inviting admin has already redeemed it (invites are single-use)
 * - `void`: the inviting node is no longer an admin of the PTN holding its CA key, so nobody can redeem it
 * - `refused`: the inviting admin found it invalid (its clock says expired, or it names another PTN or admin)
 */
export type InviteRejection = 'malformed' | 'bad_signature' | 'expired' | 'used' | 'void' | 'refused'

export class InvalidInviteError extends InvalidInputError {
  override name = 'InvalidInviteError'
  readonly reason: InviteRejection
  constructor (message: string, reason: InviteRejection) {
    super(message, 'inviteCode')
    this.reason = reason
  }
}

/** A CA private key that does not belong to the PTN it is offered for (400, `param: caKeyHex`). */
export class CaKeyMismatchError extends InvalidInputError {
  override name = 'CaKeyMismatchError'
  constructor (message: string) {
    super(message, 'caKeyHex')
  }
}
