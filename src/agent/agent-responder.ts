import { randomUUID } from 'node:crypto'
import type { Stream } from '@libp2p/interface'
import type { Logger } from 'pino'
import { BusyError, UnavailableError } from '../errors.ts'
import type { NodeIdentity } from '../identity/index.ts'
import { InvalidGenerationRequestError, type ChatMessage, type ChatRequest, type InferenceEvent } from '../inference/index.ts'
import type { PeerGeneration } from '../serving/index.ts'
import { batchesWithKeepAlives, writeMessage, type FrameStream, type SignedEnvelope } from '../wire/index.ts'
import type { Conversations, Filed, StoredMessage } from './conversations.ts'
import {
  MAX_AGENT_MESSAGE_BYTES, openAgentMessage, readAgentRequest, signAgentMessage, type AgentErrorCode, type AgentMessage, type AgentReplyFrame
} from './protocol.ts'

/** How the agent answers a peer: through the serving policy, the one door from peers to the engine (src/serving). */
export interface AgentServing {
  generate (ask: PeerGeneration, options: { signal?: AbortSignal }): AsyncIterable<InferenceEvent>
}

export interface AgentResponderDeps {
  identity: NodeIdentity
  conversations: Conversations
  serving: AgentServing
  /** The agent's name and system prompt now (the profile may change between two messages). */
  profile: () => { name: string, systemPrompt: string }
  log: Logger
}

export interface AgentResponderOptions {
  maxAnswerTokens: number
  maxHistoryMessages: number
  keepaliveMs: number
}

/**
 * The answering side of the agent protocol: one peer's message, checked (signed by the connection's peer, addressed
 * here, in a conversation of that peer's), answered by the loaded model through the serving policy with the
 * conversation so far, signed, and filed with the question in one transaction before the answer goes out.
 */
export class AgentResponder {
  readonly #deps: AgentResponderDeps
  readonly #options: AgentResponderOptions
  readonly #shutdown = new AbortController()

  constructor (deps: AgentResponderDeps, options: AgentResponderOptions) {
    this.#deps = deps
    this.#options = options
  }

  /** Cancels the answers being generated (their streams are reset). */
  stop (reason: Error): void {
    this.#shutdown.abort(reason)
  }

  /**
   * One exchange with a peer. A malformed, oversized or forged message throws (ProtocolError): the network resets the
   * stream and bans the peer. A message that may not be accepted, or cannot be answered, gets an error frame.
   */
  readonly handle = async (stream: Stream, peer: { readonly nodeID: string }): Promise<void> => {
    const { frames, envelope } = await readAgentRequest(stream)
    const message = openAgentMessage(envelope, { from: peer.nodeID, to: this.#deps.identity.nodeID, inReplyTo: null })
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
    this.#deps.log.info({ peer: peer.nodeID, conversationID: message.conversationID, answered: reply.type === 'answer', code: reply.type === 'error' ? reply.code : undefined, ms: Math.round(performance.now() - started) }, 'agent message from a peer')
  }

  /** The last frame for a peer's message; null when the exchange was cancelled (the peer left, or we stop). */
  async #answer (question: Filed, frames: FrameStream, signal: AbortSignal, nodeID: string): Promise<AgentReplyFrame | null> {
    const { message } = question
    const { conversations } = this.#deps
    const precheck = conversations.precheck(message)
    if (precheck.refusal != null) return errorFrame('refused', precheck.refusal)
    if (precheck.repeat != null) return { type: 'answer', envelope: precheck.repeat }

    let history = conversations.recent(message.conversationID, this.#options.maxHistoryMessages)
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
    const { identity } = this.#deps
    const answer: AgentMessage = {
      conversationID: message.conversationID,
      messageID: randomUUID(),
      inReplyTo: message.messageID,
      from: identity.nodeID,
      fromName: this.#deps.profile().name,
      to: message.from,
      content: truncateUtf8(text.toWellFormed(), MAX_AGENT_MESSAGE_BYTES),
      sentAt: new Date().toISOString()
    }
    const envelope = signAgentMessage(identity, answer)
    const refusal = conversations.file(message.from, message.fromName, question, { message: answer, envelope })
    if (refusal != null) return errorFrame('refused', refusal)
    return { type: 'answer', envelope }
  }

  /** The chat the model answers: system prompt, the conversation so far (ours as assistant, the peer's as user), the message. */
  #prompt (message: AgentMessage, history: StoredMessage[], withSystemPrompt: boolean): ChatRequest & { kind: 'chat' } {
    const me = this.#deps.identity.nodeID
    const messages: ChatMessage[] = []
    if (withSystemPrompt) messages.push({ role: 'system', content: this.#systemPrompt(message.fromName) })
    for (const row of history) messages.push({ role: row.sender === me ? 'assistant' : 'user', content: row.content })
    messages.push({ role: 'user', content: message.content })
    return { kind: 'chat', messages, maxTokens: this.#options.maxAnswerTokens }
  }

  #systemPrompt (peerName: string): string {
    const { name, systemPrompt } = this.#deps.profile()
    if (systemPrompt !== '') return systemPrompt
    return `You are ${name}, the agent of a meshnode node. You are talking with ${peerName}, the agent of another node. Answer helpfully and briefly.`
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
    for await (const batch of batchesWithKeepAlives(this.#deps.serving.generate(ask, { signal }), { everyMs: this.#options.keepaliveMs, keepAlive })) {
      for (const event of batch) if (event.type === 'delta') text += event.text
    }
    return text
  }

  #generationFailed (err: unknown): AgentReplyFrame {
    // The serving policy's and the engine's expected refusals: no model served to peers now (none loaded, or
    // `inference_backend` is peers), or every slot open to this peer and the queue are taken.
    if (err instanceof UnavailableError) return errorFrame('no_model', err.message)
    if (err instanceof BusyError) return errorFrame('busy', err.message)
    this.#deps.log.error({ err }, 'answering a peer\'s agent message failed')
    return errorFrame('internal', 'The agent failed to generate an answer')
  }
}

/** The stream to the asking peer broke while its answer was generated: nobody is left to answer. */
class StreamLostError extends Error {
  override name = 'StreamLostError'
}

function errorFrame (code: AgentErrorCode, message: string): AgentReplyFrame {
  return { type: 'error', code, message: message.slice(0, 2000) }
}

/** The longest prefix of `text` of at most `maxBytes` UTF-8 bytes, never cutting a character. */
function truncateUtf8 (text: string, maxBytes: number): string {
  if (Buffer.byteLength(text, 'utf8') <= maxBytes) return text
  const { read } = new TextEncoder().encodeInto(text, new Uint8Array(maxBytes))
  return text.slice(0, read)
}
