import { randomBytes } from 'node:crypto'
import { z } from 'zod'
import type { NodeIdentity } from '../identity/index.ts'
import { HexKey, PtnName } from './certificates.ts'
import { InvalidInviteError } from './errors.ts'
import { openDocument, sealDocument } from './signed-document.ts'

export const INVITE_DOMAIN = 'meshnode/ptn-invite/v1'
/** Invite codes expire after 1 hour. */
export const INVITE_TTL_MS = 60 * 60_000
export const MAX_INVITE_CHARS = 2048

/**
 * What an invite code says: which PTN, and which admin redeems it. Signed by the PTN's CA key (every admin holds
 * it), so the joiner can check before dialing anyone that the PTN itself sent it to that admin; the admin named is
 * the only node that redeems it, and it remembers the nonce so that the code works once.
 */
export const InvitePayload = z.strictObject({
  ptnID: HexKey,
  ptnName: PtnName,
  adminNodeID: HexKey,
  /** 128 random bits, base64url: what the admin records as used. */
  nonce: z.string().regex(/^[A-Za-z0-9_-]{22}$/),
  expiresAt: z.iso.datetime()
})
export type InvitePayload = z.infer<typeof InvitePayload>

/** Makes an invite code for `ptnName`, redeemable at `adminNodeID` once, within `ttlMs`. */
export function createInvite (ca: NodeIdentity, input: { ptnName: string, adminNodeID: string, now?: number, ttlMs?: number }): string {
  const payload: InvitePayload = {
    ptnID: ca.nodeID,
    ptnName: input.ptnName,
    adminNodeID: input.adminNodeID,
    nonce: randomBytes(16).toString('base64url'),
    expiresAt: new Date((input.now ?? Date.now()) + (input.ttlMs ?? INVITE_TTL_MS)).toISOString()
  }
  return sealDocument(payload, ca, INVITE_DOMAIN)
}

/** Decodes an invite code and checks its signature against its `ptnID` and its expiry; throws `InvalidInviteError`. */
export function verifyInvite (inviteCode: string, options: { now?: number } = {}): InvitePayload {
  const document = openDocument(inviteCode, InvitePayload, { domain: INVITE_DOMAIN, maxChars: MAX_INVITE_CHARS })
  if (document == null) throw new InvalidInviteError('inviteCode is not a meshnode PTN invite code', 'malformed')
  const invite = document.payload
  if (!document.signedBy(invite.ptnID)) {
    throw new InvalidInviteError(`Invite code signature does not verify against PTN ${invite.ptnID}`, 'bad_signature')
  }
  if (Date.parse(invite.expiresAt) <= (options.now ?? Date.now())) {
    throw new InvalidInviteError(`Invite code expired at ${invite.expiresAt}`, 'expired')
  }
  return invite
}
