import { randomUUID } from 'node:crypto'
import type { StatementSync } from 'node:sqlite'
import type { Stream } from '@libp2p/interface'
import type { Logger } from 'pino'
import { z } from 'zod'
import { ConflictError, CorruptStateError, InvalidInputError, NotFoundError, TooLargeError, UnavailableError, errorText } from '../errors.ts'
import { parseNodeID, type NodeID, type NodeIdentity } from '../identity/index.ts'
import type { Database } from '../store/index.ts'
import type { PeerInfo } from '../network/index.ts'
import { ProtocolError, type PeerStreams, type SignedEnvelope } from '../wire/index.ts'
import { AgentDirectory, type DirectoryEntry, type DirectoryPeers } from './agent-directory.ts'
import { AgentResponder, type AgentServing } from './agent-responder.ts'
import { Conversations, fromMessage, type ConversationDetail, type ConversationMessage, type ConversationSummary } from './conversations.ts'
import {
  AGENT_KEEPALIVE_MS, AGENT_PROTOCOL, AgentRefusalError, MAX_AGENT_CAPABILITIES, MAX_AGENT_CAPABILITY_CHARS, MAX_AGENT_MESSAGE_BYTES,
  MAX_AGENT_NAME_CHARS, MAX_INBOUND_AGENT_STREAMS, exchangeAgentMessage, openAgentMessage, signAgentMessage, type AgentMessage
} from './protocol.ts'

/** Largest system prompt, in UTF-8 bytes. */
export const MAX_SYSTEM_PROMPT_BYTES = 8 * 1024

/** What the agent uses of the peer network (`PeerNetwork` has it). */
export interface AgentNetwork extends PeerStreams, DirectoryPeers {
  handle (protocol: string, handler: (stream: Stream, peer: { readonly nodeID: string }) => Promise<void>, options: { maxInboundStreams: number }): Promise<void>
  peer (nodeID: string): PeerInfo | null
  /** Disconnects and bans a peer whose answer was malformed, oversized or forged (other errors are ignored). */
  reportMisbehaviour (nodeID: string, err: unknown): Promise<void>
}

/** What the agent uses of the local engine (`LocalEngine` has it): the model its profile names. */
export interface AgentEngine {
  loaded (): { modelID: string } | null
}

export interface AgentServiceDeps {
  db: Database
  identity: NodeIdentity
  network: AgentNetwork
  engine: AgentEngine
  serving: AgentServing
  log: Logger
  /** The node's display name: the agent's name until the profile sets one. */
  name: string
}

export interface AgentServiceOptions {
  /** Most tokens of one answer. @default 256 */
  maxAnswerTokens?: number
  /** Earlier messages of the conversation the model sees with a new one (fewer when they do not fit). @default 32 */
  maxHistoryMessages?: number
  /** How long a send waits for the peer's answer in all. @default 300_000 */
  answerTimeoutMs?: number
  /** A send gives up on a peer that sent nothing (not even a keep-alive) for this long. @default 30_000 */
  idleTimeoutMs?: number
  /** Deadline for reaching the peer and opening the stream. @default 15_000 */
  openTimeoutMs?: number
  /** How often the answering side sends a keep-alive frame while it works. @default 5_000 */
  keepaliveMs?: number
  /** Agents that went offline the directory still lists (as `offline`), most recently seen kept. @default 256 */
  maxRememberedAgents?: number
}

/** This node's agent profile, with `systemPrompt` (an addition; never advertised to peers). */
export interface AgentProfile {
  nodeID: string
  name: string
  capabilities: string[]
  /** The loaded model, null when none. */
  model: string | null
  status: 'online'
  systemPrompt: string
}

export interface AgentProfilePatch {
  name?: string
  capabilities?: string[]
  systemPrompt?: string
}

export interface SendRequest {
  /** The peer to talk to; may be left out when `conversationID` names a conversation (its peer is meant). */
  peerID?: string | null
  /** A conversation of this node to continue; a new one is started without it. */
  conversationID?: string | null
  message: string
}

export interface SendResult {
  conversation: ConversationSummary
  message: ConversationMessage
  reply: ConversationMessage
}

const StoredCapabilities = z.array(z.string())

interface ProfileRow { name: string | null, capabilities: string, system_prompt: string }

/**
 * The node's agent: its profile, advertised to peers in the signed capability
 * record; the directory of the agents peers advertise (`AgentDirectory`); and conversations with them
 * (`Conversations`). A message goes to the peer signed by this node; the peer's agent answers it with its loaded model
 * (`AgentResponder`, through the serving policy), and both nodes file the message and the answer under the same
 * conversation id. Each side files an exchange only once it is complete, in one transaction: a failed send leaves
 * nothing on either side.
 */
export class AgentService {
  readonly #identity: NodeIdentity
  readonly #network: AgentNetwork
  readonly #engine: AgentEngine
  readonly #log: Logger
  readonly #nodeName: string
  readonly #options: Required<AgentServiceOptions>
  readonly #shutdown = new AbortController()
  readonly #conversations: Conversations
  readonly #directory: AgentDirectory
  readonly #responder: AgentResponder
  readonly #setProfile: StatementSync
  #profile: { name: string | null, capabilities: string[], systemPrompt: string }
  readonly #profileListeners = new Set<() => void>()
  #started = false

  constructor (deps: AgentServiceDeps, options: AgentServiceOptions = {}) {
    this.#identity = deps.identity
    this.#network = deps.network
    this.#engine = deps.engine
    this.#log = deps.log
    this.#nodeName = deps.name
    this.#options = {
      maxAnswerTokens: options.maxAnswerTokens ?? 256,
      maxHistoryMessages: options.maxHistoryMessages ?? 32,
      answerTimeoutMs: options.answerTimeoutMs ?? 300_000,
      idleTimeoutMs: options.idleTimeoutMs ?? 30_000,
      openTimeoutMs: options.openTimeoutMs ?? 15_000,
      keepaliveMs: options.keepaliveMs ?? AGENT_KEEPALIVE_MS,
      maxRememberedAgents: options.maxRememberedAgents ?? 256
    }
    this.#conversations = new Conversations({ db: deps.db })
    this.#directory = new AgentDirectory({ peers: deps.network }, { maxRemembered: this.#options.maxRememberedAgents })
    this.#responder = new AgentResponder({
      identity: deps.identity,
      conversations: this.#conversations,
      serving: deps.serving,
      profile: () => ({ name: this.#name(), systemPrompt: this.#profile.systemPrompt }),
      log: deps.log
    }, this.#options)
    this.#setProfile = deps.db.prepare('UPDATE agent_profile SET name = ?, capabilities = ?, system_prompt = ? WHERE id = 1')
    this.#profile = readProfile(deps.db)
  }

  get nodeID (): string {
    return this.#identity.nodeID
  }

  /** Answers peers' messages (once the network starts) and follows peers' agent profiles for the directory. */
  async start (): Promise<void> {
    if (this.#started) return
    this.#started = true
    this.#directory.start()
    await this.#network.handle(AGENT_PROTOCOL, this.#responder.handle, { maxInboundStreams: MAX_INBOUND_AGENT_STREAMS })
  }

  /** Cancels the answers being generated for peers (their streams are reset); sends in flight fail with their HTTP request. */
  stop (): void {
    const reason = new UnavailableError('The agent is stopping')
    this.#shutdown.abort(reason)
    this.#responder.stop(reason)
    this.#directory.stop()
  }

  // ---- profile ------------------------------------------------------------------------------------------------------

  profile (): AgentProfile {
    return {
      nodeID: this.#identity.nodeID,
      name: this.#name(),
      capabilities: [...this.#profile.capabilities],
      model: this.#engine.loaded()?.modelID ?? null,
      status: 'online',
      systemPrompt: this.#profile.systemPrompt
    }
  }

  /**
   * Changes the given fields and keeps them; the others stay. Names and capabilities are trimmed, capabilities
   * de-duplicated ignoring case. Peers see the change when this node pushes its changed record.
   */
  updateProfile (patch: AgentProfilePatch): AgentProfile {
    const next = { ...this.#profile }
    if (patch.name !== undefined) next.name = checkName(patch.name)
    if (patch.capabilities !== undefined) next.capabilities = checkCapabilities(patch.capabilities)
    if (patch.systemPrompt !== undefined) next.systemPrompt = checkSystemPrompt(patch.systemPrompt)
    this.#setProfile.run(next.name, JSON.stringify(next.capabilities), next.systemPrompt)
    this.#profile = next
    this.#log.info({ name: this.#name(), capabilities: next.capabilities }, 'agent profile changed')
    for (const listener of this.#profileListeners) listener()
    return this.profile()
  }

  /** Calls `listener` after each change of the profile (`updateProfile`); returns the function that stops it. Listeners must not throw. */
  onProfileChange (listener: () => void): () => void {
    this.#profileListeners.add(listener)
    return () => { this.#profileListeners.delete(listener) }
  }

  /** What peers see of this agent in its capability record: name and capabilities (the system prompt stays here). */
  advertisedProfile (): { name: string, capabilities: string[] } {
    return { name: this.#name(), capabilities: [...this.#profile.capabilities] }
  }

  /** See `AgentDirectory.list`. */
  directory (filter: { capability?: string | null } = {}): DirectoryEntry[] {
    return this.#directory.list(filter)
  }

  // ---- conversations ------------------------------------------------------------------------------------------------

  /** Newest message first. */
  conversations (): ConversationSummary[] {
    return this.#conversations.list()
  }

  /** One conversation with its messages, in the same order on both nodes. NotFoundError for an unknown id. */
  conversation (id: string): ConversationDetail {
    return this.#conversations.detail(id)
  }

  /**
   * Sends a message to a peer's agent and waits for its answer; both are filed in the conversation on both nodes.
   * Throws TooLargeError over 32 KiB, NotFoundError for an unknown peer or conversation, ConflictError when the
   * conversation is with another peer or the peer refused, UnavailableError when the peer cannot be reached, has no
   * model loaded, is busy or does not answer in time. Nothing is filed on a failure.
   */
  async send (request: SendRequest, options: { signal?: AbortSignal } = {}): Promise<SendResult> {
    const content = checkContent(request.message)
    const { peerID, conversationID } = this.#target(request)
    const me = this.#identity.nodeID
    const message: AgentMessage = {
      conversationID,
      messageID: randomUUID(),
      inReplyTo: null,
      from: me,
      fromName: this.#name(),
      to: peerID,
      content,
      sentAt: new Date().toISOString()
    }
    const envelope = signAgentMessage(this.#identity, message)
    const answerEnvelope = await this.#deliver(peerID, envelope, options.signal)
    let answer: AgentMessage
    try {
      answer = openAgentMessage(answerEnvelope, { from: peerID, to: me, inReplyTo: message.messageID })
      if (answer.conversationID !== conversationID) {
        throw new ProtocolError(`Answer ${answer.messageID} is filed in conversation ${answer.conversationID}, not ${conversationID}`, 'invalid')
      }
    } catch (err) {
      if (!(err instanceof ProtocolError)) throw err
      await this.#network.reportMisbehaviour(peerID, err)
      throw new UnavailableError(`The agent of peer ${peerID} answered with an invalid message: ${err.message}`, { cause: err })
    }
    const refusal = this.#conversations.file(peerID, answer.fromName,
      { message, envelope }, { message: answer, envelope: answerEnvelope as SignedEnvelope<AgentMessage> })
    if (refusal != null) throw new UnavailableError(`The answer of peer ${peerID} cannot be filed: ${refusal}`)
    const conversation = this.#conversations.summary(conversationID) as ConversationSummary
    return { conversation, message: fromMessage(message), reply: fromMessage(answer) }
  }

  /** The peer and conversation a send goes to; a new conversation id when none is given. */
  #target (request: SendRequest): { peerID: NodeID, conversationID: string } {
    const me = this.#identity.nodeID
    let peerID = request.peerID == null ? null : checkPeerID(request.peerID, me)
    let conversationID = request.conversationID ?? null
    if (conversationID != null) {
      const conversation = this.#conversations.summary(conversationID)
      if (conversation == null) throw new NotFoundError(`Conversation not found: ${conversationID}`)
      if (peerID != null && peerID !== conversation.peerID) throw new ConflictError(`Conversation ${conversationID} is with peer ${conversation.peerID}, not ${peerID}`)
      peerID = conversation.peerID as NodeID   // filed only for a nodeID that signed its messages
      // A peer this node has talked to is known; not being in the table now means it cannot be reached.
      if (this.#network.peer(peerID) == null) throw new UnavailableError(`Peer ${peerID} of conversation ${conversationID} is offline`)
    } else {
      if (peerID == null) throw new InvalidInputError('peerID is required to start a conversation', 'peerID')
      conversationID = randomUUID()
    }
    if (this.#network.peer(peerID) == null) throw new NotFoundError(`Unknown peer: ${peerID}`)
    return { peerID, conversationID }
  }

  /** Sends the message and returns the peer's answer envelope, or throws in our error kinds. */
  async #deliver (peerID: string, envelope: SignedEnvelope<AgentMessage>, callerSignal: AbortSignal | undefined): Promise<SignedEnvelope> {
    const deadline = AbortSignal.timeout(this.#options.answerTimeoutMs)
    const signal = AbortSignal.any([deadline, this.#shutdown.signal, ...(callerSignal == null ? [] : [callerSignal])])
    try {
      return await exchangeAgentMessage(this.#network, peerID, envelope, { signal, openTimeoutMs: this.#options.openTimeoutMs, idleTimeoutMs: this.#options.idleTimeoutMs })
    } catch (err) {
      if (callerSignal?.aborted === true) throw callerSignal.reason
      if (err instanceof AgentRefusalError) throw fromRefusal(peerID, err)
      if (err instanceof NotFoundError || err instanceof UnavailableError) throw err
      if (deadline.aborted) throw new UnavailableError(`The agent of peer ${peerID} did not answer within ${this.#options.answerTimeoutMs} ms`)
      if (err instanceof ProtocolError) throw new UnavailableError(`The agent of peer ${peerID} did not answer properly: ${err.message}`, { cause: err })
      throw new UnavailableError(`Peer ${peerID} is unreachable: ${errorText(err)}`, { cause: err })
    }
  }

  #name (): string {
    return this.#profile.name ?? this.#nodeName
  }
}

function readProfile (db: Database): { name: string | null, capabilities: string[], systemPrompt: string } {
  const row = db.prepare('SELECT name, capabilities, system_prompt FROM agent_profile WHERE id = 1').get() as ProfileRow | undefined
  if (row == null) throw new CorruptStateError('The agent profile row is missing from the database')
  let capabilities: string[]
  try {
    capabilities = StoredCapabilities.parse(JSON.parse(row.capabilities))
  } catch (err) {
    throw new CorruptStateError(`The stored agent capabilities are unreadable: ${(err as Error).message}`)
  }
  return { name: row.name, capabilities, systemPrompt: row.system_prompt }
}

function checkName (name: string): string {
  const trimmed = name.trim()
  if (trimmed.length < 1 || trimmed.length > MAX_AGENT_NAME_CHARS) throw new InvalidInputError(`name must be 1 to ${MAX_AGENT_NAME_CHARS} characters`, 'name')
  return trimmed
}

function checkCapabilities (capabilities: string[]): string[] {
  if (capabilities.length > MAX_AGENT_CAPABILITIES) throw new InvalidInputError(`capabilities holds at most ${MAX_AGENT_CAPABILITIES} entries`, 'capabilities')
  const seen = new Set<string>()
  const result: string[] = []
  for (const capability of capabilities) {
    const trimmed = capability.trim()
    if (trimmed.length < 1 || trimmed.length > MAX_AGENT_CAPABILITY_CHARS) {
      throw new InvalidInputError(`each capability must be 1 to ${MAX_AGENT_CAPABILITY_CHARS} characters`, 'capabilities')
    }
    if (seen.has(trimmed.toLowerCase())) continue
    seen.add(trimmed.toLowerCase())
    result.push(trimmed)
  }
  return result
}

function checkSystemPrompt (prompt: string): string {
  if (!prompt.isWellFormed()) throw new InvalidInputError('systemPrompt must be well-formed Unicode text', 'systemPrompt')
  if (Buffer.byteLength(prompt, 'utf8') > MAX_SYSTEM_PROMPT_BYTES) throw new InvalidInputError(`systemPrompt must be at most ${MAX_SYSTEM_PROMPT_BYTES} bytes`, 'systemPrompt')
  return prompt
}

function checkPeerID (peerID: string, me: string): NodeID {
  if (peerID === me) throw new InvalidInputError('This node\'s agent does not talk to itself', 'peerID')
  return parseNodeID(peerID, 'peerID')
}

function checkContent (content: string): string {
  if (content.length === 0) throw new InvalidInputError('message must not be empty', 'message')
  if (!content.isWellFormed()) throw new InvalidInputError('message must be well-formed Unicode text', 'message')
  const bytes = Buffer.byteLength(content, 'utf8')
  if (bytes > MAX_AGENT_MESSAGE_BYTES) throw new TooLargeError(`message is ${bytes} bytes; at most ${MAX_AGENT_MESSAGE_BYTES} (32 KiB) are accepted`)
  return content
}

/** The peer's error frame in our error kinds (docs/API.md, Agent). */
function fromRefusal (peerID: string, err: AgentRefusalError): Error {
  const why = `The agent of peer ${peerID}: ${err.message}`
  switch (err.code) {
    case 'too_long': return new TooLargeError(why)
    case 'refused': return new ConflictError(why)
    case 'no_model':
    case 'busy':
    case 'internal':
      return new UnavailableError(why)
  }
}
