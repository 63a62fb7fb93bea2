import type { StatementSync } from 'node:sqlite'
import { NotFoundError } from '../errors.ts'
import { inTransaction, type Database } from '../store/index.ts'
import { SignedEnvelope } from '../wire/index.ts'
import type { AgentMessage } from './protocol.ts'

/** A conversation with a peer's agent, as listings show it. */
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

/** One signed message to file: the message and the envelope it came in. */
export interface Filed {
  message: AgentMessage
  envelope: SignedEnvelope<AgentMessage>
}

/** A stored message, as the model sees the conversation so far. */
export interface StoredMessage {
  sender: string
  content: string
}

interface ConversationRow { id: string, peer_id: string, peer_name: string, last_message: string, message_count: number }
interface MessageRow { id: string, conversation_id: string, sender: string, role: 'user' | 'agent', content: string, created: string, envelope: string }

/**
 * The agent's conversations with peers' agents (tables `agent_conversations`, `agent_messages`): each exchange, a
 * question and its answer, is filed whole in one transaction, with the signed envelope each message came in, so that
 * every stored message still proves who said it. Both nodes file the same exchange under the same ids, and list it in
 * the same order.
 */
export class Conversations {
  readonly #db: Database
  readonly #list: StatementSync
  readonly #get: StatementSync
  readonly #insertConversation: StatementSync
  readonly #touch: StatementSync
  readonly #messages: StatementSync
  readonly #recent: StatementSync
  readonly #getMessage: StatementSync
  readonly #getReply: StatementSync
  readonly #insertMessage: StatementSync

  constructor (deps: { db: Database }) {
    const db = this.#db = deps.db
    const summary = `SELECT c.id, c.peer_id, c.peer_name, c.last_message,
      (SELECT COUNT(*) FROM agent_messages m WHERE m.conversation_id = c.id) AS message_count FROM agent_conversations c`
    this.#list = db.prepare(`${summary} ORDER BY c.last_message DESC, c.id`)
    this.#get = db.prepare(`${summary} WHERE c.id = ?`)
    this.#insertConversation = db.prepare('INSERT INTO agent_conversations (id, peer_id, peer_name, created, last_message) VALUES (?, ?, ?, ?, ?)')
    this.#touch = db.prepare('UPDATE agent_conversations SET peer_name = ?, last_message = max(last_message, ?) WHERE id = ?')
    const message = 'SELECT id, conversation_id, sender, role, content, created, envelope FROM agent_messages'
    // Exchanges in the order their questions were sent, each question before its answer, ties by id: the order
    // depends only on what both nodes file, so it is the same on both even when answers arrive out of order.
    const ordered = `SELECT m.id, m.conversation_id, m.sender, m.role, m.content, m.created, m.envelope,
      COALESCE(q.created, m.created) AS asked, COALESCE(m.reply_to, m.id) AS exchange, m.reply_to IS NOT NULL AS answer
      FROM agent_messages m LEFT JOIN agent_messages q ON q.id = m.reply_to WHERE m.conversation_id = ?`
    this.#messages = db.prepare(`${ordered} ORDER BY asked, exchange, answer`)
    this.#recent = db.prepare(`SELECT * FROM (${ordered} ORDER BY asked DESC, exchange DESC, answer DESC LIMIT ?) ORDER BY asked, exchange, answer`)
    this.#getMessage = db.prepare(`${message} WHERE id = ?`)
    this.#getReply = db.prepare(`${message} WHERE reply_to = ?`)
    this.#insertMessage = db.prepare(`INSERT INTO agent_messages (id, conversation_id, sender, role, content, created, reply_to, envelope)
      VALUES (?, ?, ?, ?, ?, ?, ?, ?)`)
  }

  /** Newest message first. */
  list (): ConversationSummary[] {
    return (this.#list.all() as unknown as ConversationRow[]).map(toSummary)
  }

  /** One conversation's summary, or null. */
  summary (id: string): ConversationSummary | null {
    const row = this.#get.get(id) as ConversationRow | undefined
    return row == null ? null : toSummary(row)
  }

  /** One conversation with its messages, in the same order on both nodes. NotFoundError for an unknown id. */
  detail (id: string): ConversationDetail {
    const summary = this.summary(id)
    if (summary == null) throw new NotFoundError(`Conversation not found: ${id}`)
    return { ...summary, messages: (this.#messages.all(id) as unknown as MessageRow[]).map(toMessage) }
  }

  /** The newest `limit` messages of a conversation, oldest first: what the model sees of it. */
  recent (conversationID: string, limit: number): StoredMessage[] {
    return (this.#recent.all(conversationID, limit) as unknown as MessageRow[]).map(({ sender, content }) => ({ sender, content }))
  }

  /**
   * Whether a peer's message may be answered: a conversation is the one peer's it was started with (nobody writes into
   * another's), and a message id is used once. The same message again (a retry) gets the answer already given, its
   * stored envelope checked for shape before it goes out again.
   */
  precheck (message: AgentMessage): { refusal?: string, repeat?: SignedEnvelope } {
    const conversation = this.#get.get(message.conversationID) as ConversationRow | undefined
    if (conversation != null && conversation.peer_id !== message.from) {
      return { refusal: `Conversation ${message.conversationID} is not one with node ${message.from}` }
    }
    const existing = this.#getMessage.get(message.messageID) as MessageRow | undefined
    if (existing == null) return {}
    const reply = this.#getReply.get(message.messageID) as MessageRow | undefined
    if (reply != null && existing.conversation_id === message.conversationID && existing.sender === message.from && existing.content === message.content) {
      return { repeat: SignedEnvelope.parse(JSON.parse(reply.envelope)) }
    }
    return { refusal: `Message id ${message.messageID} was used before` }
  }

  /**
   * Files a complete exchange, the question and its answer, in one transaction; the conversation is created with it
   * when new. Returns why it cannot be filed (the conversation is another peer's, a message id is taken), or null.
   */
  file (peerID: string, peerName: string, question: Filed, answer: Filed): string | null {
    const conversationID = question.message.conversationID
    return inTransaction(this.#db, () => {
      const conversation = this.#get.get(conversationID) as ConversationRow | undefined
      if (conversation != null && conversation.peer_id !== peerID) return `Conversation ${conversationID} is not one with node ${peerID}`
      for (const { message } of [question, answer]) {
        if (this.#getMessage.get(message.messageID) != null) return `Message id ${message.messageID} was used before`
      }
      if (conversation == null) this.#insertConversation.run(conversationID, peerID, peerName, question.message.sentAt, question.message.sentAt)
      for (const { message, envelope } of [question, answer]) {
        this.#insertMessage.run(message.messageID, conversationID, message.from, message.inReplyTo == null ? 'user' : 'agent',
          message.content, message.sentAt, message.inReplyTo, JSON.stringify(envelope))
      }
      this.#touch.run(peerName, maxIso(question.message.sentAt, answer.message.sentAt), conversationID)
      return null
    })
  }
}

/** A message as the API shows it. */
export function fromMessage (message: AgentMessage): ConversationMessage {
  return { id: message.messageID, from: message.from, role: message.inReplyTo == null ? 'user' : 'agent', content: message.content, created: message.sentAt }
}

function toSummary (row: ConversationRow): ConversationSummary {
  return { id: row.id, peerID: row.peer_id, peerName: row.peer_name, messageCount: Number(row.message_count), lastMessage: row.last_message }
}

function toMessage (row: MessageRow): ConversationMessage {
  return { id: row.id, from: row.sender, role: row.role, content: row.content, created: row.created }
}

function maxIso (a: string, b: string): string {
  return a > b ? a : b
}
