import { z } from 'zod'
import {
  MAX_AGENT_CAPABILITIES, MAX_AGENT_CAPABILITY_CHARS, MAX_AGENT_NAME_CHARS, MAX_SYSTEM_PROMPT_BYTES
} from '../../agent/index.ts'
import { IsoTime, SNAKE_ALIASES, withAliases } from './common.ts'

// The /v1/app/agent routes (docs/API.md, Agent): this node's profile, the directory of peers' agents, and
// conversations with them. Bodies accept the snake_case aliases older clients send.

// Only the aliases of these bodies' own fields: SNAKE_ALIASES also maps `model`, which the profile must refuse as unknown.
const PROFILE_ALIASES = { system_prompt: 'systemPrompt' } as const
const SEND_ALIASES = { peer_id: SNAKE_ALIASES.peer_id, conversation_id: 'conversationID' } as const

/** This node's agent profile, with `systemPrompt` (this node's own profile only; never advertised). */
export const AgentProfile = z.object({
  nodeID: z.string(),
  name: z.string(),
  capabilities: z.array(z.string()),
  model: z.string().nullable().describe('the loaded model; null when none'),
  status: z.literal('online'),
  systemPrompt: z.string().describe('shapes how this agent answers; empty: a short default prompt')
})
export type AgentProfile = z.infer<typeof AgentProfile>

/**
 * Every field optional; the ones given replace the stored ones. Unknown keys are refused (400), as in the settings
 * PATCH: a misspelt field would otherwise change nothing without saying so.
 */
export const AgentProfilePatch = withAliases(z.strictObject({
  name: z.string().trim().min(1).max(MAX_AGENT_NAME_CHARS).optional(),
  capabilities: z.array(z.string().trim().min(1).max(MAX_AGENT_CAPABILITY_CHARS)).max(MAX_AGENT_CAPABILITIES).optional(),
  systemPrompt: z.string()
    .refine((text) => Buffer.byteLength(text, 'utf8') <= MAX_SYSTEM_PROMPT_BYTES, { message: `must be at most ${MAX_SYSTEM_PROMPT_BYTES} bytes` })
    .optional()
}), PROFILE_ALIASES)

/** A peer's agent. */
export const DirectoryEntry = z.object({
  nodeID: z.string(),
  name: z.string(),
  capabilities: z.array(z.string()),
  model: z.string().nullable().describe('the model the peer has loaded; null when none or offline'),
  status: z.enum(['online', 'offline']).describe('online: a peer now; offline: seen since this node started, gone since')
})
export type DirectoryEntry = z.infer<typeof DirectoryEntry>

export const Directory = z.object({ agents: z.array(DirectoryEntry) })
export type Directory = z.infer<typeof Directory>

export const DirectoryQuery = z.object({
  capability: z.string().trim().min(1).max(MAX_AGENT_CAPABILITY_CHARS).optional().describe('only agents with this capability (any case)')
})

/** A conversation with a peer's agent. */
export const Conversation = z.object({
  id: z.string(),
  peerID: z.string(),
  peerName: z.string(),
  messageCount: z.number().int(),
  lastMessage: IsoTime
})
export type Conversation = z.infer<typeof Conversation>

export const ConversationList = z.object({ conversations: z.array(Conversation) })
export type ConversationList = z.infer<typeof ConversationList>

export const ConversationMessage = z.object({
  id: z.string(),
  from: z.string().describe('nodeID of the node that sent and signed it'),
  role: z.enum(['user', 'agent']).describe('user: written by a node\'s user; agent: an agent\'s answer'),
  content: z.string(),
  created: IsoTime
})
export type ConversationMessage = z.infer<typeof ConversationMessage>

export const ConversationDetail = Conversation.extend({
  messages: z.array(ConversationMessage).describe('by when each exchange was started, each answer after its question')
})
export type ConversationDetail = z.infer<typeof ConversationDetail>

/** Ids are UUIDs; fastify's router refuses a path parameter over 100 characters before this schema sees it. */
export const ConversationParams = z.object({ id: z.string().min(1).max(100) })

/**
 * `message` has no length limit here: the 32 KiB limit is the agent's (413), and the 1 MiB body limit bounds it first.
 * `peerID` may be left out when `conversationID` names the conversation to continue.
 */
export const SendMessageBody = withAliases(z.object({
  peerID: z.string().min(1).max(256).nullish(),
  conversationID: z.string().min(1).max(128).nullish().describe('a conversation to continue; a new one is started without it'),
  message: z.string().min(1)
}), SEND_ALIASES)

export const SendMessageResult = z.object({
  conversation: Conversation,
  message: ConversationMessage.describe('what this node sent'),
  reply: ConversationMessage.describe('the peer agent\'s answer')
})
export type SendMessageResult = z.infer<typeof SendMessageResult>
