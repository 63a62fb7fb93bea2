// What other layers (the composition root, HTTP routes, the CLI) use of the agent domain.
export { AgentService, MAX_SYSTEM_PROMPT_BYTES } from './agent-service.ts'
export type {
  AgentServiceDeps, AgentServiceOptions, AgentNetwork, AgentEngine, AgentProfile, AgentProfilePatch, SendRequest, SendResult
} from './agent-service.ts'
export type { AgentServing } from './agent-responder.ts'
export type { DirectoryEntry } from './agent-directory.ts'
export type { ConversationSummary, ConversationMessage, ConversationDetail } from './conversations.ts'
export {
  AGENT_PROTOCOL, MAX_AGENT_MESSAGE_BYTES, MAX_AGENT_NAME_CHARS, MAX_AGENT_CAPABILITIES, MAX_AGENT_CAPABILITY_CHARS,
  AgentMessage, AgentReplyFrame, AgentRefusalError, AGENT_ERROR_CODES, signAgentMessage, openAgentMessage
} from './protocol.ts'
export type { AgentErrorCode } from './protocol.ts'
