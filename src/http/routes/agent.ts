import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod'
import type { AgentService } from '../../agent/index.ts'
import {
  AgentProfile, AgentProfilePatch, ConversationDetail, ConversationList, ConversationParams, Directory, DirectoryQuery,
  SendMessageBody, SendMessageResult
} from '../schemas/agent.ts'
import { errorResponses } from '../schemas/common.ts'
import { clientGone } from '../sse.ts'

export interface AgentRoutesOptions {
  agent: AgentService
}

/** This node's agent, the agents of its peers, and conversations with them. */
export const agentRoutes: FastifyPluginAsyncZod<AgentRoutesOptions> = async (app, { agent }) => {
  const tags = ['agent']

  app.get('/v1/app/agent/profile', { schema: { summary: 'This node\'s agent profile', tags, response: { 200: AgentProfile, ...errorResponses } } }, async () => agent.profile())

  app.patch('/v1/app/agent/profile', {
    schema: { summary: 'Change this node\'s agent profile', tags, body: AgentProfilePatch, response: { 200: AgentProfile, ...errorResponses } }
  }, async (request) => agent.updateProfile(request.body))

  app.get('/v1/app/agent/directory', {
    schema: { summary: 'Agents that peers advertise', tags, querystring: DirectoryQuery, response: { 200: Directory, ...errorResponses } }
  }, async (request) => ({ agents: agent.directory({ capability: request.query.capability }) }))

  app.get('/v1/app/agent/conversations', {
    schema: { summary: 'Conversations with peers\' agents', tags, response: { 200: ConversationList, ...errorResponses } }
  }, async () => ({ conversations: agent.conversations() }))

  app.get('/v1/app/agent/conversations/:id', {
    schema: { summary: 'One conversation with its messages', tags, params: ConversationParams, response: { 200: ConversationDetail, ...errorResponses } }
  }, async (request) => agent.conversation(request.params.id))

  // Waits for the peer's answer; a client that leaves cancels it (at the peer too), and nothing is filed.
  app.post('/v1/app/agent/conversations', {
    schema: { summary: 'Send a message to a peer\'s agent and wait for its answer', tags, body: SendMessageBody, response: { 200: SendMessageResult, ...errorResponses } }
  }, async (request, reply) => await agent.send(request.body, { signal: clientGone(reply) }))
}
