import { z } from 'zod'
import { PTN_ROLES } from '../../ptn/index.ts'
import { SNAKE_ALIASES, withAliases } from './common.ts'

// Private trusted networks: the /v1/app/ptn routes (docs/API.md, Private trusted networks). Bodies accept the
// snake_case aliases older clients send.

/** Hex of an Ed25519 public key, in either case (as the OpenAPI pattern says); lowercased before use. */
function hexKey (what: string) {
  return z.string().trim().toLowerCase().regex(/^[0-9a-fA-F]{64}$/, `expected a ${what}: 64 hex characters`)
}
const PtnID = hexKey('ptnID')
const NodeID = hexKey('nodeID')
const Role = z.enum(PTN_ROLES)
/** A certificate is a few hundred characters; these limits only keep absurd input out before the domain looks. */
const CertData = z.string().min(1).max(4096)
const InviteCode = z.string().min(1).max(2048)

export const Membership = z.object({
  ptnID: z.string(),
  name: z.string(),
  role: Role,
  members: z.number().int(),
  status: z.enum(['active', 'left', 'recovered'])
})
export type Membership = z.infer<typeof Membership>

export const MembershipList = z.object({ memberships: z.array(Membership) })
export type MembershipList = z.infer<typeof MembershipList>

export const CreatePtnBody = z.object({ name: z.string().trim().min(1).max(128) })
export const CreatedPtn = z.object({ ptnID: z.string(), name: z.string(), role: z.literal('admin') })
export type CreatedPtn = z.infer<typeof CreatedPtn>

export const PtnIDBody = withAliases(z.object({ ptnID: PtnID }), SNAKE_ALIASES)

export const Invite = z.object({ inviteCode: z.string() })
export type Invite = z.infer<typeof Invite>

export const IssueCertBody = withAliases(z.object({ ptnID: PtnID, nodeID: NodeID, role: Role.default('provider') }), SNAKE_ALIASES)
export const CertificateResult = z.object({ certData: z.string(), nodeID: z.string(), role: Role })
export type CertificateResult = z.infer<typeof CertificateResult>

export const JoinWithCertBody = withAliases(z.object({ certData: CertData }), SNAKE_ALIASES)
export const JoinBody = withAliases(z.object({ inviteCode: InviteCode }), SNAKE_ALIASES)
export const Joined = z.object({ ptnID: z.string(), name: z.string(), role: Role, status: z.literal('active') })
export type Joined = z.infer<typeof Joined>

/** `force` (an addition): an admin holding the only known copy of the CA key must confirm. */
export const LeaveBody = withAliases(z.object({ ptnID: PtnID, force: z.boolean().default(false) }), SNAKE_ALIASES)
export const Left = z.object({ status: z.literal('left'), ptnID: z.string() })
export type Left = z.infer<typeof Left>

export const PromoteAdminBody = withAliases(z.object({ ptnID: PtnID, nodeID: NodeID }), SNAKE_ALIASES)
export const Promoted = z.object({ nodeID: z.string(), role: z.literal('admin') })
export type Promoted = z.infer<typeof Promoted>

/** The key's form and that it is the PTN's are checked by the domain, which names `caKeyHex` either way. */
export const ImportCaKeyBody = withAliases(z.object({ ptnID: PtnID, caKeyHex: z.string().min(1).max(256) }), SNAKE_ALIASES)
export const Imported = z.object({ status: z.literal('imported'), ptnID: z.string() })
export type Imported = z.infer<typeof Imported>

export const Recovered = z.object({ status: z.literal('recovered'), ptnID: z.string() })
export type Recovered = z.infer<typeof Recovered>
