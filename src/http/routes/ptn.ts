import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod'
import { MAX_PTN_MEMBERSHIPS, type PtnService } from '../../ptn/index.ts'
import { errorResponses } from '../schemas/common.ts'
import {
  CertificateResult, CreatePtnBody, CreatedPtn, ImportCaKeyBody, Imported, Invite, IssueCertBody, JoinBody, JoinWithCertBody,
  Joined, LeaveBody, Left, MembershipList, PromoteAdminBody, Promoted, PtnIDBody, Recovered
} from '../schemas/ptn.ts'
import { clientGone } from '../sse.ts'

/** Private trusted networks. Steps that reach other nodes stop when the client goes away. */
export const ptnRoutes: FastifyPluginAsyncZod<{ ptn: PtnService }> = async (app, { ptn }) => {
  const tags = ['ptn']
  /** The steps that add a membership in effect. */
  const description = `409 when this node is already in ${MAX_PTN_MEMBERSHIPS} PTNs (MAX_PTN_MEMBERSHIPS): leave one first.`

  app.get('/v1/app/ptn', { schema: { summary: 'This node\'s PTN memberships', tags, response: { 200: MembershipList, ...errorResponses } } }, async () => {
    return { memberships: ptn.list() }
  })

  app.post('/v1/app/ptn/create', { schema: { summary: 'Create a PTN with this node as admin', description, tags, body: CreatePtnBody, response: { 200: CreatedPtn, ...errorResponses } } }, async (request) => {
    return ptn.create(request.body.name)
  })

  app.post('/v1/app/ptn/invite', { schema: { summary: 'Make a one-time invite code (admin)', tags, body: PtnIDBody, response: { 200: Invite, ...errorResponses } } }, async (request) => {
    return ptn.invite(request.body.ptnID)
  })

  app.post('/v1/app/ptn/issue-cert', { schema: { summary: 'Issue a member certificate (admin)', tags, body: IssueCertBody, response: { 200: CertificateResult, ...errorResponses } } }, async (request) => {
    return ptn.issueCertificate(request.body.ptnID, request.body.nodeID, request.body.role)
  })

  app.post('/v1/app/ptn/join-with-cert', { schema: { summary: 'Join a PTN with a certificate', description, tags, body: JoinWithCertBody, response: { 200: Joined, ...errorResponses } } }, async (request) => {
    return ptn.joinWithCertificate(request.body.certData)
  })

  app.post('/v1/app/ptn/join', { schema: { summary: 'Join a PTN with an invite code', description, tags, body: JoinBody, response: { 200: Joined, ...errorResponses } } }, async (request, reply) => {
    return await ptn.join(request.body.inviteCode, { signal: clientGone(reply) })
  })

  app.post('/v1/app/ptn/leave', { schema: { summary: 'Leave a PTN', tags, body: LeaveBody, response: { 200: Left, ...errorResponses } } }, async (request, reply) => {
    return await ptn.leave(request.body.ptnID, { force: request.body.force, signal: clientGone(reply) })
  })

  app.post('/v1/app/ptn/promote-admin', { schema: { summary: 'Make a member an admin (admin)', tags, body: PromoteAdminBody, response: { 200: Promoted, ...errorResponses } } }, async (request, reply) => {
    return await ptn.promoteAdmin(request.body.ptnID, request.body.nodeID, { signal: clientGone(reply) })
  })

  app.post('/v1/app/ptn/import-ca-key', { schema: { summary: 'Import a PTN\'s CA key', tags, body: ImportCaKeyBody, response: { 200: Imported, ...errorResponses } } }, async (request) => {
    return ptn.importCaKey(request.body.ptnID, request.body.caKeyHex)
  })

  app.post('/v1/app/ptn/recover', { schema: { summary: 'Recover a membership with the CA key', description, tags, body: PtnIDBody, response: { 200: Recovered, ...errorResponses } } }, async (request, reply) => {
    return await ptn.recover(request.body.ptnID, { signal: clientGone(reply) })
  })
}
