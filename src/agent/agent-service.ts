import { randomUUID } from 'node:crypto'
import type { StatementSync } from 'node:sqlite'
import type { Stream } from '@libp2p/interface'
import type { Logger } from 'pino'
import { z } from 'zod'
import { BusyError, ConflictError, CorruptStateError, InvalidInputError, NotFoundError, TooLargeError, UnavailableError } from '../errors.ts'
import { parseNodeID, type NodeID, type NodeIdentity } from '../identity/index.ts'
import { InvalidGenerationRequestError, type ChatEvent, type ChatMessage, type ChatRequest } from '../inference/index.ts'
import type { PeerInfo } from '../network/index.ts'
import type { PeerGeneration } from '../serving/index.ts'
import { ProtocolError, batchesWithKeepAlives, writeMessage, type FrameStream, type PeerStreams, type SignedEnvelope } from '../wire/index.ts'
import { inTransaction, type Database } from '../store/index.ts'
import {
  AGENT_KEEPALIVE_MS, AGENT_PROTOCOL, AgentRefusalError, MAX_AGENT_CAPABILITIES, MAX_AGENT_CAPABILITY_CHARS, MAX_AGENT_MESSAGE_BYTES,
  MAX_AGENT_NAME_CHARS, MAX_INBOUND_AGENT_STREAMS, exchangeAgentMessage, openAgentMessage, readAgentRequest, signAgentMessage,
  type AgentErrorCode, type AgentMessage, type AgentReplyFrame
} from './protocol.ts'

/** Largest system prompt, in UTF-8 bytes. */
export const MAX_SYSTEM_PROMPT_BYTES = 8 * 1024

/** What the agent uses of the peer network (`PeerNetwork` has it). */
export interface AgentNetwork extends PeerStreams {
  handle (protocol: string, handler: (stream: Stream, peer: { readonly nodeID: string }) => Promise<void>, options: { maxInboundStreams: number }): Promise<void>
  peer (nodeID: string): PeerInfo | null
  peers (): PeerInfo[]
  /** Disconnects and bans a peer whose answer was malformed, oversized or forged (other errors are ignored). */
  reportMisbehaviour (nodeID: string, err: unknown): Promise<void>
  on (event: 'peer:online' | 'peer:updated', listener: (peer: PeerInfo) => void): unknown
  off (event: 'peer:online' | 'peer:updated', listener: (peer: PeerInfo) => void): unknown
}

/** What the agent uses of the local engine (`LocalEngine` has it): the model its profile names. */
export interface AgentEngine {
  loaded (): { modelID: string } | null
}

/** How the agent answers a peer: through the serving policy, the one door from peers to the engine (src/serving). */
export interface AgentServing {
  generate (ask: PeerGeneration, options: { signal?: AbortSignal }): AsyncIterable<ChatEvent>
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

/** Spec §2.10, plus `systemPrompt` (an addition; never advertised to peers). */
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

/** Spec §2.10: a peer's agent as its signed capability record advertises it. */
export interface DirectoryEntry {
  nodeID: string
  name: string
  capabilities: string[]
  model: string | null
  /** `online` while the peer is in the peer table; `offline` for one seen since start that has left. */
  status: 'online' | 'offline'
}

/** Spec §2.11. */
export interface ConversationSummary {
  id: string
  peerID: string
  peerName: string
  messageCount: number
  /** When the newest message was sent. */
  lastMessage: string
}

export interface ConversationMessage {
  id: string
  /** nodeID of the node that sent (and signed) it. */
  from: string
  /** `user`: written by a node's user; `agent`: an agent's answer. */
  role: 'user' | 'agent'
  content: string
  /** When its sender sent it. */
  created: string
}

export interface ConversationDetail extends ConversationSummary {
  /** By when each exchange was started (its question's `created`, ties by id), each answer after its question. */
  messages: ConversationMessage[]
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

/** What a peer's record says of its agent (`CapabilityRecord.agent`); other keys are ignored for later versions. */
const AgentAdvert = z.object({
  name: z.string().min(1).max(MAX_AGENT_NAME_CHARS),
  capabilities: z.array(z.string().min(1).max(MAX_AGENT_CAPABILITY_CHARS)).max(MAX_AGENT_CAPABILITIES)
})

const StoredCapabilities = z.array(z.string())

interface ProfileRow { name: string | null, capabilities: string, system_prompt: string }
interface ConversationRow { id: string, peer_id: string, peer_name: string, last_message: string, message_count: number }
interface MessageRow { id: string, conversation_id: string, sender: string, role: 'user' | 'agent', content: string, created: string, envelope: string }

/** One signed message to file: the message and the envelope it came in. */
interface Filed { message: AgentMessage, envelope: SignedEnvelope<AgentMessage> }

/**
 * The node's agent (spec §2.10, §2.11, CONTRACT §9): its profile, advertised to peers in the signed capability
 * record; the directory of the agents peers advertise; and conversations with them. A message goes to the peer signed
 * by this node; the peer's agent answers it with its loaded model, and both nodes file the message and the answer
 * under the same conversation id. Each side files an exchange only once it is complete, in one transaction: a failed
 * send leaves nothing on either side.
 */
export class AgentService {
  readonly #db: Database
  readonly #identity: NodeIdentity
  readonly #network: AgentNetwork
  readonly #engine: AgentEngine
  readonly #serving: AgentServing
  readonly #log: Logger
  readonly #nodeName: string
  readonly #options: Required<AgentServiceOptions>
  readonly #shutdown = new AbortController()
  /** Every agent seen online since start, by nodeID, least recently seen first. */
  readonly #remembered = new Map<string, DirectoryEntry>()
  #profile: { name: string | null, capabilities: string[], systemPrompt: string }
  #started = false

  readonly #getProfile: StatementSync
  readonly #setProfile: StatementSync
  readonly #listConversations: StatementSync
  readonly #getConversation: StatementSync
  readonly #insertConversation: StatementSync
  readonly #touchConversation: StatementSync
  readonly #listMessages: StatementSync
  readonly #recentMessages: StatementSync
  readonly #getMessage: StatementSync
  readonly #getReply: StatementSync
  readonly #insertMessage: StatementSync

  constructor (deps: AgentServiceDeps, options: AgentServiceOptions = {}) {
    this.#db = deps.db
    this.#identity = deps.identity
    this.#network = deps.network
    this.#engine = deps.engine
    this.#serving = deps.serving
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
    const db = deps.db
    this.#getProfile = db.prepare('SELECT name, capabilities, system_prompt FROM agent_profile WHERE id = 1')
    this.#setProfile = db.prepare('UPDATE agent_profile SET name = ?, capabilities = ?, system_prompt = ? WHERE id = 1')
    const summary = `SELECT c.id, c.peer_id, c.peer_name, c.last_message,
      (SELECT COUNT(*) FROM agent_messages m WHERE m.conversation_id = c.id) AS message_count FROM agent_conversations c`
    this.#listConversations = db.prepare(`${summary} ORDER BY c.last_message DESC, c.id`)
    this.#getConversation = db.prepare(`${summary} WHERE c.id = ?`)
    this.#insertConversation = db.prepare('INSERT INTO agent_conversations (id, peer_id, peer_name, created, last_message) VALUES (?, ?, ?, ?, ?)')
    this.#touchConversation = db.prepare('UPDATE agent_conversations SET peer_name = ?, last_message = max(last_message, ?) WHERE id = ?')
    const message = 'SELECT id, conversation_id, sender, role, content, created, envelope FROM agent_messages'
    // Exchanges in the order their questions were sent, each question before its answer, ties by id: the order
    // depends only on what both nodes file, so it is the same on both even when answers arrive out of order.
    const ordered = `SELECT m.id, m.conversation_id, m.sender, m.role, m.content, m.created, m.envelope,
      COALESCE(q.created, m.created) AS asked, COALESCE(m.reply_to, m.id) AS exchange, m.reply_to IS NOT NULL AS answer
      FROM agent_messages m LEFT JOIN agent_messages q ON q.id = m.reply_to WHERE m.conversation_id = ?`
    this.#listMessages = db.prepare(`${ordered} ORDER BY asked, exchange, answer`)
    this.#recentMessages = db.prepare(`SELECT * FROM (${ordered} ORDER BY asked DESC, exchange DESC, answer DESC LIMIT ?) ORDER BY asked, exchange, answer`)
    this.#getMessage = db.prepare(`${message} WHERE id = ?`)
    this.#getReply = db.prepare(`${message} WHERE reply_to = ?`)
    this.#insertMessage = db.prepare(`INSERT INTO agent_messages (id, conversation_id, sender, role, content, created, reply_to, envelope)
      VALUES (?, ?, ?, ?, ?, ?, ?, ?)`)
    this.#profile = this.#readProfile()
  }

  get nodeID (): string {
    return this.#identity.nodeID
  }

  /** Answers peers' messages (once the network starts) and follows peers' agent profiles for the directory. */
  async start (): Promise<void> {
    if (this.#started) return
    this.#started = true
    this.#network.on('peer:online', this.#onPeer)
    this.#network.on('peer:updated', this.#onPeer)
    await this.#network.handle(AGENT_PROTOCOL, this.#handle, { maxInboundStreams: MAX_INBOUND_AGENT_STREAMS })
  }

  /** Cancels the answers being generated for peers (their streams are reset); sends in flight fail with their HTTP request. */
  stop (): void {
    this.#shutdown.abort(new UnavailableError('The agent is stopping'))
    this.#network.off('peer:online', this.#onPeer)
    this.#network.off('peer:updated', this.#onPeer)
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
   * de-duplicated ignoring case. Peers see the change with their next fetch of this node's record (a heartbeat).
   */
  updateProfile (patch: AgentProfilePatch): AgentProfile {
    const next = { ...this.#profile }
    if (patch.name !== undefined) next.name = checkName(patch.name)
    if (patch.capabilities !== undefined) next.capabilities = checkCapabilities(patch.capabilities)
    if (patch.systemPrompt !== undefined) next.systemPrompt = checkSystemPrompt(patch.systemPrompt)
    this.#setProfile.run(next.name, JSON.stringify(next.capabilities), next.systemPrompt)
    this.#profile = next
    this.#log.info({ name: this.#name(), capabilities: next.capabilities }, 'agent profile changed')
    return this.profile()
  }

  /** What peers see of this agent in its capability record: name and capabilities (the system prompt stays here). */
  advertisedProfile (): { name: string, capabilities: string[] } {
    return { name: this.#name(), capabilities: [...this.#profile.capabilities] }
  }

  // ---- directory ----------------------------------------------------------------------------------------------------

  /**
   * The agents of the peers in the table (online), then those seen since start that have left (offline), each by
   * name. A peer whose record has no valid agent profile is not listed. `capability` matches one of an agent's
   * capabilities exactly, ignoring case.
   */
  directory (filter: { capability?: string | null } = {}): DirectoryEntry[] {
    const online: DirectoryEntry[] = []
    for (const peer of this.#network.peers()) {
      const entry = this.#remember(peer)
      if (entry != null) online.push(entry)
    }
    const onlineIDs = new Set(online.map(entry => entry.nodeID))
    const offline = [...this.#remembered.values()]
      .filter(entry => !onlineIDs.has(entry.nodeID))
      .map(entry => ({ ...entry, model: null, status: 'offline' as const }))
    const byName = (a: DirectoryEntry, b: DirectoryEntry): number => a.name.localeCompare(b.name) || a.nodeID.localeCompare(b.nodeID)
    const wanted = filter.capability?.trim().toLowerCase() ?? ''
    return [...online.sort(byName), ...offline.sort(byName)]
      .filter(entry => wanted === '' || entry.capabilities.some(c => c.toLowerCase() === wanted))
  }

  readonly #onPeer = (peer: PeerInfo): void => {
    this.#remember(peer)
  }

  #remember (peer: PeerInfo): DirectoryEntry | null {
    const advert = AgentAdvert.safeParse(peer.record.agent)
    if (!advert.success) {
      this.#remembered.delete(peer.nodeID)   // no agent (any more): not listed, online or offline
      return null
    }
    const entry: DirectoryEntry = {
      nodeID: peer.nodeID,
      name: advert.data.name,
      capabilities: advert.data.capabilities,
      model: peer.record.models.loaded,
      status: 'online'
    }
    this.#remembered.delete(peer.nodeID)   // re-inserted last: the map stays ordered by when each was last seen
    this.#remembered.set(peer.nodeID, entry)
    for (const nodeID of this.#remembered.keys()) {
      if (this.#remembered.size <= this.#options.maxRememberedAgents) break
      this.#remembered.delete(nodeID)
    }
    return entry
  }

  // ---- conversations ------------------------------------------------------------------------------------------------

  /** Newest message first. */
  conversations (): ConversationSummary[] {
    return (this.#listConversations.all() as unknown as ConversationRow[]).map(toSummary)
  }

  /** One conversation with its messages, in the same order on both nodes. NotFoundError for an unknown id. */
  conversation (id: string): ConversationDetail {
    const row = this.#getConversation.get(id) as ConversationRow | undefined
    if (row == null) throw new NotFoundError(`Conversation not found: ${id}`)
    const messages = (this.#listMessages.all(id) as unknown as MessageRow[]).map(toMessage)
    return { ...toSummary(row), messages }
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
    const refusal = this.#fileExchange(peerID, answer.fromName,
      { message, envelope }, { message: answer, envelope: answerEnvelope as SignedEnvelope<AgentMessage> })
    if (refusal != null) throw new UnavailableError(`The answer of peer ${peerID} cannot be filed: ${refusal}`)
    const conversation = this.#getConversation.get(conversationID) as unknown as ConversationRow
    return { conversation: toSummary(conversation), message: fromMessage(message), reply: fromMessage(answer) }
  }

  /** The peer and conversation a send goes to; a new conversation id when none is given. */
  #target (request: SendRequest): { peerID: NodeID, conversationID: string } {
    const me = this.#identity.nodeID
    let peerID = request.peerID == null ? null : checkPeerID(request.peerID, me)
    let conversationID = request.conversationID ?? null
    if (conversationID != null) {
      const row = this.#getConversation.get(conversationID) as ConversationRow | undefined
      if (row == null) throw new NotFoundError(`Conversation not found: ${conversationID}`)
      if (peerID != null && peerID !== row.peer_id) throw new ConflictError(`Conversation ${conversationID} is with peer ${row.peer_id}, not ${peerID}`)
      peerID = row.peer_id as NodeID   // filed only for a nodeID that signed its messages
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
      throw new UnavailableError(`Peer ${peerID} is unreachable: ${(err as Error).message}`, { cause: err })
    }
  }

  // ---- answering peers ----------------------------------------------------------------------------------------------

  /**
   * One exchange with a peer. A malformed, oversized or forged message throws (ProtocolError): the network resets the
   * stream and bans the peer. A message that may not be accepted, or cannot be answered, gets an error frame.
   */
  readonly #handle = async (stream: Stream, peer: { readonly nodeID: string }): Promise<void> => {
    const { frames, envelope } = await readAgentRequest(stream)
    const message = openAgentMessage(envelope, { from: peer.nodeID, to: this.#identity.nodeID, inReplyTo: null })
    const peerGone = new AbortController()
    stream.addEventListener('close', () => { peerGone.abort(new Error('The sending peer closed the stream')) }, { once: true })
    const signal = AbortSignal.any([peerGone.signal, this.#shutdown.signal])
    const started = performance.now()
    const reply = await this.#answer({ message, envelope: envelope as SignedEnvelope<AgentMessage> }, frames, signal, peer.nodeID)
    if (reply == null) {
      stream.abort(new Error('The exchange was cancelled'))
      return
    }
    await writeMessage(frames, reply, { signal })
    await stream.close({ signal })
    this.#log.info({ peer: peer.nodeID, conversationID: message.conversationID, answered: reply.type === 'answer', code: reply.type === 'error' ? reply.code : undefined, ms: Math.round(performance.now() - started) }, 'agent message from a peer')
  }

  /** The last frame for a peer's message; null when the exchange was cancelled (the peer left, or we stop). */
  async #answer (question: Filed, frames: FrameStream, signal: AbortSignal, nodeID: string): Promise<AgentReplyFrame | null> {
    const { message } = question
    const precheck = this.#precheck(message)
    if (precheck.refusal != null) return errorFrame('refused', precheck.refusal)
    if (precheck.repeat != null) return { type: 'answer', envelope: precheck.repeat }

    let history = (this.#recentMessages.all(message.conversationID, this.#options.maxHistoryMessages) as unknown as MessageRow[])
    let withSystemPrompt = true
    let text: string
    for (;;) {
      try {
        text = await this.#generate({ kind: 'agent', nodeID, ptnID: null, requesterLabel: null, modelID: null, request: this.#prompt(message, history, withSystemPrompt) }, frames, signal)
        break
      } catch (err) {
        if (signal.aborted || err instanceof StreamLostError) return null
        if (err instanceof InvalidGenerationRequestError && err.param === 'messages') {
          // The prompt does not fit the model's context: the older half of the history goes first, then the system prompt.
          if (history.length > 0) {
            history = history.slice(Math.ceil(history.length / 2))
            continue
          }
          if (withSystemPrompt) {
            withSystemPrompt = false
            continue
          }
          return errorFrame('too_long', `The message does not fit the context of this agent's model: ${err.message}`)
        }
        return this.#generationFailed(err)
      }
    }
    const answer: AgentMessage = {
      conversationID: message.conversationID,
      messageID: randomUUID(),
      inReplyTo: message.messageID,
      from: this.#identity.nodeID,
      fromName: this.#name(),
      to: message.from,
      content: truncateUtf8(text.toWellFormed(), MAX_AGENT_MESSAGE_BYTES),
      sentAt: new Date().toISOString()
    }
    const envelope = signAgentMessage(this.#identity, answer)
    const refusal = this.#fileExchange(message.from, message.fromName, question, { message: answer, envelope })
    if (refusal != null) return errorFrame('refused', refusal)
    return { type: 'answer', envelope }
  }

  /**
   * Whether a peer's message may be answered: a conversation is the one peer's it was started with (nobody writes into
   * another's), and a message id is used once. The same message again (a retry) gets the answer already given.
   */
  #precheck (message: AgentMessage): { refusal?: string, repeat?: SignedEnvelope } {
    const conversation = this.#getConversation.get(message.conversationID) as ConversationRow | undefined
    if (conversation != null && conversation.peer_id !== message.from) {
      return { refusal: `Conversation ${message.conversationID} is not one with node ${message.from}` }
    }
    const existing = this.#getMessage.get(message.messageID) as MessageRow | undefined
    if (existing == null) return {}
    const reply = this.#getReply.get(message.messageID) as MessageRow | undefined
    if (reply != null && existing.conversation_id === message.conversationID && existing.sender === message.from && existing.content === message.content) {
      return { repeat: JSON.parse(reply.envelope) as SignedEnvelope }
    }
    return { refusal: `Message id ${message.messageID} was used before` }
  }

  /** The chat the model answers: system prompt, the conversation so far (ours as assistant, the peer's as user), the message. */
  #prompt (message: AgentMessage, history: MessageRow[], withSystemPrompt: boolean): ChatRequest {
    const me = this.#identity.nodeID
    const messages: ChatMessage[] = []
    if (withSystemPrompt) messages.push({ role: 'system', content: this.#systemPrompt(message.fromName) })
    for (const row of history) messages.push({ role: row.sender === me ? 'assistant' : 'user', content: row.content })
    messages.push({ role: 'user', content: message.content })
    return { messages, maxTokens: this.#options.maxAnswerTokens }
  }

  #systemPrompt (peerName: string): string {
    if (this.#profile.systemPrompt !== '') return this.#profile.systemPrompt
    return `You are ${this.#name()}, the agent of a meshnode node. You are talking with ${peerName}, the agent of another node. Answer helpfully and briefly.`
  }

  /** Runs the generation through the serving policy, sending keep-alive frames while it waits; returns the text. */
  async #generate (ask: PeerGeneration, frames: FrameStream, signal: AbortSignal): Promise<string> {
    let text = ''
    const keepAlive = async (): Promise<void> => {
      try {
        await writeMessage(frames, { type: 'keepalive' }, { signal })
      } catch (err) {
        throw new StreamLostError('The keep-alive could not be sent; the peer is gone', { cause: err })
      }
    }
    for await (const batch of batchesWithKeepAlives(this.#serving.generate(ask, { signal }), { everyMs: this.#options.keepaliveMs, keepAlive })) {
      for (const event of batch) if (event.type === 'delta') text += event.text
    }
    return text
  }

  #generationFailed (err: unknown): AgentReplyFrame {
    // The serving policy's and the engine's expected refusals: no model served to peers now (none loaded, or
    // `inference_backend` is peers), or every slot open to this peer and the queue are taken.
    if (err instanceof UnavailableError) return errorFrame('no_model', err.message)
    if (err instanceof BusyError) return errorFrame('busy', err.message)
    this.#log.error({ err }, 'answering a peer\'s agent message failed')
    return errorFrame('internal', 'The agent failed to generate an answer')
  }

  // ---- storage ------------------------------------------------------------------------------------------------------

  /**
   * Files a complete exchange, the question and its answer, in one transaction; the conversation is created with it
   * when new. Returns why it cannot be filed (the conversation is another peer's, a message id is taken), or null.
   */
  #fileExchange (peerID: string, peerName: string, question: Filed, answer: Filed): string | null {
    const conversationID = question.message.conversationID
    return inTransaction(this.#db, () => {
      const conversation = this.#getConversation.get(conversationID) as ConversationRow | undefined
      if (conversation != null && conversation.peer_id !== peerID) return `Conversation ${conversationID} is not one with node ${peerID}`
      for (const { message } of [question, answer]) {
        if (this.#getMessage.get(message.messageID) != null) return `Message id ${message.messageID} was used before`
      }
      if (conversation == null) this.#insertConversation.run(conversationID, peerID, peerName, question.message.sentAt, question.message.sentAt)
      for (const { message, envelope } of [question, answer]) {
        this.#insertMessage.run(message.messageID, conversationID, message.from, message.inReplyTo == null ? 'user' : 'agent',
          message.content, message.sentAt, message.inReplyTo, JSON.stringify(envelope))
      }
      this.#touchConversation.run(peerName, maxIso(question.message.sentAt, answer.message.sentAt), conversationID)
      return null
    })
  }

  #readProfile (): { name: string | null, capabilities: string[], systemPrompt: string } {
    const row = this.#getProfile.get() as ProfileRow | undefined
    if (row == null) throw new CorruptStateError('The agent profile row is missing from the database')
    let capabilities: string[]
    try {
      capabilities = StoredCapabilities.parse(JSON.parse(row.capabilities))
    } catch (err) {
      throw new CorruptStateError(`The stored agent capabilities are unreadable: ${(err as Error).message}`)
    }
    return { name: row.name, capabilities, systemPrompt: row.system_prompt }
  }

  #name (): string {
    return this.#profile.name ?? this.#nodeName
  }
}

/** The stream to the asking peer broke while its answer was generated: nobody is left to answer. */
class StreamLostError extends Error {
  override name = 'StreamLostError'
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

function errorFrame (code: AgentErrorCode, message: string): AgentReplyFrame {
  return { type: 'error', code, message: message.slice(0, 2000) }
}

function toSummary (row: ConversationRow): ConversationSummary {
  return { id: row.id, peerID: row.peer_id, peerName: row.peer_name, messageCount: Number(row.message_count), lastMessage: row.last_message }
}

function toMessage (row: MessageRow): ConversationMessage {
  return { id: row.id, from: row.sender, role: row.role, content: row.content, created: row.created }
}

function fromMessage (message: AgentMessage): ConversationMessage {
  return { id: message.messageID, from: message.from, role: message.inReplyTo == null ? 'user' : 'agent', content: message.content, created: message.sentAt }
}

function maxIso (a: string, b: string): string {
  return a > b ? a : b
}

/** The longest prefix of `text` of at most `maxBytes` UTF-8 bytes, never cutting a character. */
function truncateUtf8 (text: string, maxBytes: number): string {
  if (Buffer.byteLength(text, 'utf8') <= maxBytes) return text
  const { read } = new TextEncoder().encodeInto(text, new Uint8Array(maxBytes))
  return text.slice(0, read)
}

