import type { Logger } from 'pino'
import type { NodeIdentity } from '../identity/index.ts'
import { caFromHex, caKeyHex, type CaKeyStore } from './ca-keys.ts'
import { checkCertificate, verifyCertificate } from './certificates.ts'
import { CaKeyMismatchError, InvalidCertificateError, InvalidInviteError } from './errors.ts'
import { verifyInvite } from './invites.ts'
import { inEffect, type MembershipStore } from './membership-store.ts'
import type { PtnAuthority } from './ptn-authority.ts'
import { MAX_INBOUND_PTN_STREAMS, PTN_PROTOCOL, servePtnStream, type PtnPeers, type PtnReply, type PtnRequest } from './protocol.ts'

export interface PtnResponderDeps {
  identity: NodeIdentity
  /** The peer network the protocol is served on; null when it is not running, and then nothing is served. */
  peers: PtnPeers | null
  store: MembershipStore
  keys: CaKeyStore
  /** Signs the certificates redeemed invites and recover requests get. */
  authority: PtnAuthority
  log: Logger
}

export interface PtnResponderOptions {
  /** The clock invites and certificates other nodes send are judged by, in epoch milliseconds. @default Date.now */
  now?: () => number
}

/**
 * The answering side of the PTN protocol: what this node says to another node's join request (an invite it made),
 * promotion, leave notice or recover request. The asking node is the connection's remote peer, authenticated by
 * the transport; each answer is decided here and a refusal says why.
 */
export class PtnResponder {
  readonly #identity: NodeIdentity
  readonly #peers: PtnPeers | null
  readonly #store: MembershipStore
  readonly #keys: CaKeyStore
  readonly #authority: PtnAuthority
  readonly #log: Logger
  readonly #now: () => number

  constructor (deps: PtnResponderDeps, options: PtnResponderOptions = {}) {
    this.#identity = deps.identity
    this.#peers = deps.peers
    this.#store = deps.store
    this.#keys = deps.keys
    this.#authority = deps.authority
    this.#log = deps.log
    this.#now = options.now ?? (() => Date.now())
  }

  /** Registers the PTN protocol on the peer network, so admins and members can reach this node. */
  async start (): Promise<void> {
    if (this.#peers == null) return
    await this.#peers.handle(PTN_PROTOCOL, async (stream, peer) => {
      await servePtnStream(stream, peer.nodeID, { identity: this.#identity, log: this.#log, answer: (request, from) => this.answer(request, from) })
    }, { maxInboundStreams: MAX_INBOUND_PTN_STREAMS })
  }

  /** The answer to `from`'s request. */
  answer (request: PtnRequest, from: string): PtnReply {
    switch (request.type) {
      case 'join-request': return this.#redeemInvite(request.ptnID, request.inviteCode, from)
      case 'promote': return this.#acceptPromotion(request.ptnID, request.certData, request.caKeyHex, from)
      case 'leave-notice': return this.#acceptLeaveNotice(request.ptnID, from)
      case 'recover-request': return this.#reissue(request.ptnID, request.certData, from)
    }
  }

  #redeemInvite (ptnID: string, inviteCode: string, from: string): PtnReply {
    let invite
    try {
      invite = verifyInvite(inviteCode, { now: this.#now() })
    } catch (err) {
      if (!(err instanceof InvalidInviteError)) throw err
      return refused('invite_invalid', err.message)
    }
    if (invite.ptnID !== ptnID) return refused('invite_invalid', `Invite code is for PTN ${invite.ptnID}, not ${ptnID}`)
    if (invite.adminNodeID !== this.#identity.nodeID) return refused('invite_invalid', `Invite code is redeemed at node ${invite.adminNodeID}, not here`)
    const authority = this.#authority.adminAuthority(ptnID)
    if (authority == null) return refused('not_admin', `This node is no longer an admin of PTN ${ptnID}`)
    const certData = this.#store.redeemInvite(invite.nonce, ptnID, from, () => this.#authority.issue(authority.ca, authority.row.name, from, 'provider'))
    return certData == null ? refused('invite_used', 'This invite code has already been used') : { type: 'cert', certData }
  }

  #acceptPromotion (ptnID: string, certData: string, keyHex: string, from: string): PtnReply {
    const row = this.#store.get(ptnID)
    if (!inEffect(row)) return refused('not_member', `This node is not a member of PTN ${ptnID}`)
    let ca: NodeIdentity
    try {
      ca = caFromHex(keyHex, ptnID)
      const cert = verifyCertificate(certData, { ptnID, nodeID: this.#identity.nodeID, now: this.#now() })
      if (cert.role !== 'admin') throw new InvalidCertificateError(`Certificate grants role ${cert.role}, not admin`, 'wrong_role')
    } catch (err) {
      if (err instanceof CaKeyMismatchError) return refused('key_mismatch', err.message)
      if (err instanceof InvalidCertificateError) return refused('cert_invalid', err.message)
      throw err
    }
    this.#keys.save(ca)
    // Only a holder of the CA key could send it: the sender is an admin.
    this.#store.becomeAdmin(ptnID, row.status, certData, from)
    this.#log.info({ ptnID, by: from }, 'promoted to admin; CA key received')
    return { type: 'ok' }
  }

  #acceptLeaveNotice (ptnID: string, from: string): PtnReply {
    if (!inEffect(this.#store.get(ptnID))) return refused('not_member', `This node is not a member of PTN ${ptnID}`)
    this.#store.noteLeft(ptnID, from)
    return { type: 'ok' }
  }

  /** Re-issues a certificate to a node this admin knows as a member (now or before), or that shows a certificate of
   *  this PTN signed by its CA, expired or not; the role is the one known or shown. */
  #reissue (ptnID: string, presented: string | null, from: string): PtnReply {
    const authority = this.#authority.adminAuthority(ptnID)
    if (authority == null) return refused('not_admin', `This node is not an admin of PTN ${ptnID} holding its CA key`)
    const known = this.#store.member(ptnID, from)
    const shown = presented == null ? null : checkCertificate(presented, { ptnID, nodeID: from, allowExpired: true, now: this.#now() })
    const role = known?.role ?? shown?.role
    if (role == null) return refused('not_member', `Node ${from} is not known as a member of PTN ${ptnID}`)
    const certData = this.#authority.issue(authority.ca, authority.row.name, from, role)
    this.#store.noteMember(ptnID, from, role)
    // An admin is one because it holds the CA key: re-issuing the role without the key would leave it unable to act.
    return role === 'admin' ? { type: 'cert', certData, caKeyHex: caKeyHex(authority.ca) } : { type: 'cert', certData }
  }
}

function refused (reason: Extract<PtnReply, { type: 'refused' }>['reason'], message: string): PtnReply {
  return { type: 'refused', reason, message: message.slice(0, 1000) }
}
