import { STATUS_CODES, validateHeaderName, validateHeaderValue } from 'node:http'
import type { Socket } from 'node:net'
import type { FastifyError, FastifyReply, FastifyRequest, FastifyBaseLogger } from 'fastify'
import { hasZodFastifySchemaValidationErrors } from 'fastify-type-provider-zod'
import {
  AuthenticationError, BusyError, ConflictError, InsufficientCreditsError, InsufficientStorageError, InvalidInputError, NotFoundError,
  PermissionError, TooLargeError, UnavailableError
} from '../errors.ts'
import { ContextOverflowError, InvalidGenerationRequestError } from '../inference/index.ts'

/** The one error body every failure answers with. */
export interface ErrorEnvelope {
  error: { message: string, type: string, param: string | null, code: string | null }
}

interface Classified {
  status: number
  type: string
  message: string
  param: string | null
  code: string | null
  retryAfterSeconds?: number
}

/**
 * The client went away before the answer was complete: an outcome, not a failure. It is logged once at info (by the
 * close hook in app.ts, which also counts it), and nothing is sent (there is nobody to send it to). Status 499, as
 * nginx records it.
 */
export class ClientClosedError extends Error {
  override name = 'ClientClosedError'
  constructor (message = 'The client closed the connection before the answer was complete') {
    super(message)
  }
}

/** The only place that turns an error into an HTTP status and an envelope. */
export function classify (err: unknown, requestID: string): Classified {
  if (err instanceof ClientClosedError) return plain(499, 'client_closed_request', err.message)
  // OpenAI's code for it, which Codex and other clients act on (a new context window, a compacted history)
  if (err instanceof ContextOverflowError) return { ...plain(400, 'invalid_request_error', err.message, wireParam(err.param)), code: 'context_length_exceeded' }
  // The engine names its fields in our camelCase; the client sent OpenAI's snake_case names (max_tokens).
  if (err instanceof InvalidGenerationRequestError) {
    const param = wireParam(err.param)
    return plain(400, 'invalid_request_error', err.param == null || param == null ? err.message : err.message.replaceAll(err.param, param), param)
  }
  if (err instanceof InvalidInputError) return plain(400, 'invalid_request_error', err.message, err.param)
  if (err instanceof AuthenticationError) return { ...plain(401, 'authentication_error', err.message), code: err.code }
  if (err instanceof InsufficientCreditsError) return plain(402, 'insufficient_credits', err.message)
  if (err instanceof PermissionError) return plain(403, 'permission_error', err.message)
  if (err instanceof NotFoundError) return plain(404, 'not_found', err.message)
  if (err instanceof ConflictError) return plain(409, 'conflict', err.message)
  if (err instanceof TooLargeError) return plain(413, 'request_too_large', err.message)
  if (err instanceof BusyError) return { ...plain(429, 'rate_limit_error', err.message), retryAfterSeconds: err.retryAfterSeconds }
  if (err instanceof UnavailableError) return plain(503, 'service_unavailable', err.message)
  if (err instanceof InsufficientStorageError) return plain(507, 'insufficient_storage', err.message)
  if (err instanceof MethodNotAllowedError) return plain(405, 'method_not_allowed', err.message)
  return fromFastifyError(err) ?? plain(500, 'internal_error', `internal error (request ${requestID})`)
}

/** A known path asked with a method it does not have; `allow` lists those it has (the `Allow` header). */
export class MethodNotAllowedError extends Error {
  override name = 'MethodNotAllowedError'
  readonly allow: readonly string[]
  constructor (method: string, path: string, allow: readonly string[]) {
    super(`Method ${method} is not allowed on ${path}; use ${allow.join(', ')}`)
    this.allow = allow
  }
}

/** The client went away before its request was read: nobody will see an answer, and it is not our failure. */
function isClientGone (err: unknown): boolean {
  const code = (err as NodeJS.ErrnoException | null)?.code
  return code === 'ECONNRESET' || code === 'ECONNABORTED' || code === 'EPIPE' || code === 'ERR_STREAM_PREMATURE_CLOSE'
}

function fromFastifyError (err: unknown): Classified | null {
  if (hasZodFastifySchemaValidationErrors(err)) {
    const first = err.validation[0]
    const path = first.instancePath.replace(/^\//, '').replaceAll('/', '.')
    const unknownKey = (first.params as { keys?: string[] } | undefined)?.keys?.[0]
    const param = unknownKey ?? (path === '' ? null : path)
    const where = err.validationContext ?? 'body'
    const message = param == null
      ? `Invalid ${where}: ${first.message ?? 'malformed'}`
      : `Invalid ${where} field ${param}: ${first.message ?? 'malformed'}`
    return plain(400, 'invalid_request_error', message, param)
  }
  // A body cut off by the client leaving: the same outcome as ClientClosedError, nobody to answer
  if (isClientGone(err)) return plain(499, 'client_closed_request', 'The client closed the connection before the request was read')
  const code = (err as FastifyError | null)?.code
  switch (code) {
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
      return plain(413, 'request_too_large', 'Request body is larger than 1 MiB')
    case 'FST_ERR_MAX_PARAM_LENGTH':
      return plain(414, 'request_too_large', 'A path segment is longer than 1024 characters')
    case 'FST_ERR_BAD_URL':
      return plain(400, 'invalid_request_error', 'The URL is not valid: a percent-encoding is malformed')
    case 'FST_ERR_CTP_INVALID_JSON_BODY':
    case 'FST_ERR_CTP_EMPTY_JSON_BODY':
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
    case 'FST_ERR_CTP_INVALID_CONTENT_LENGTH':
    case 'FST_ERR_VALIDATION':
      return plain(400, 'invalid_request_error', (err as Error).message)
  }
  // JSON.parse failures from fastify's body parser carry status 400 and no code in some versions.
  if (err instanceof SyntaxError && (err as FastifyError).statusCode === 400) {
    return plain(400, 'invalid_request_error', `Malformed JSON body: ${err.message}`)
  }
  // Any other refusal fastify makes (its errors carry a 4xx statusCode) keeps its status, in our envelope.
  const status = (err as FastifyError | null)?.statusCode
  if (typeof code === 'string' && code.startsWith('FST_') && status != null && status >= 400 && status < 500) {
    return plain(status, status === 413 || status === 414 || status === 431 ? 'request_too_large' : 'invalid_request_error', (err as Error).message)
  }
  return null
}

/**
 * A parameter path of the engine's as the client spelled it: only the request field it starts with is ours
 * (`maxTokens` → `max_tokens`); what follows is the client's own (a schema's `minItems`, a property's name).
 */
function wireParam (param: string | null): string | null {
  if (param == null) return null
  const [field, ...rest] = param.split('.')
  return [field.replace(/[a-z][A-Z]/g, (pair) => `${pair[0]}_${pair[1].toLowerCase()}`), ...rest].join('.')
}

function plain (status: number, type: string, message: string, param: string | null = null): Classified {
  return { status, type, message, param, code: null }
}

/** Builds the envelope for `err`, logging it once: 5xx with the stack under the request id, 4xx at debug. */
export function toEnvelope (err: unknown, requestID: string, log: FastifyBaseLogger): Classified & { body: ErrorEnvelope } {
  const classified = classify(err, requestID)
  if (classified.status >= 500 && classified.type === 'internal_error') {
    log.error({ err, requestID }, 'request failed unexpectedly')
  } else if (classified.status === 499) {
    // The info line of a client leaving is app.ts's, written for every route (and counted) when the socket closes
    log.debug({ requestID, outcome: classified.type }, 'the client closed the request before the answer was complete')
  } else {
    log.debug({ type: classified.type, message: classified.message }, 'request refused')
  }
  const { message, type, param, code } = classified
  const body = { error: { message, type, param, code } }
  if (err instanceof ContextOverflowError) anthropicMessages.set(body, `prompt is too long: ${err.promptTokens} tokens > ${err.roomTokens} maximum`)
  return { ...classified, body }
}

/**
 * Messages Anthropic's dialect words its own way, by the envelope they replace (an envelope travels alone, to a
 * stream's error event). A prompt over the context is "prompt is too long: N tokens > M maximum", as Anthropic's API
 * says it: Claude Code reads those words and numbers to compact its history.
 */
const anthropicMessages = new WeakMap<ErrorEnvelope, string>()

export function errorHandler (err: unknown, request: FastifyRequest, reply: FastifyReply): FastifyReply {
  const envelope = toEnvelope(err, request.id, request.log)
  if (envelope.status === 499) {
    reply.hijack()
    reply.raw.destroy()
    return reply
  }
  // A header Node refuses to write would fail this answer too, and fastify's bare 500 would go out instead
  for (const [name, value] of Object.entries(reply.getHeaders())) {
    if (!isValidHeader(name, value)) reply.removeHeader(name)
  }
  if (envelope.retryAfterSeconds != null) void reply.header('retry-after', String(envelope.retryAfterSeconds))
  if (err instanceof MethodNotAllowedError) void reply.header('allow', err.allow.join(', '))
  // The official SDKs retry a 409 (up to ten times, in Claude Code) unless told not to: ours say what a retry cannot
  // change (a download in the way, a budget, a file that cannot be loaded)
  if (envelope.status === 409) void reply.header('x-should-retry', 'false')
  const body = request.routeOptions.config?.errorShape === 'anthropic' ? anthropicError(envelope.body, request.id) : envelope.body
  return reply.code(envelope.status).type('application/json').send(body)
}

function isValidHeader (name: string, value: number | string | string[] | undefined): boolean {
  try {
    validateHeaderName(name)
    for (const one of Array.isArray(value) ? value : [value]) if (one !== undefined) validateHeaderValue(name, String(one))
    return true
  } catch {
    return false
  }
}

/**
 * Our error types in Anthropic's words (its SDK's `ErrorType`; `request_too_large` is in its error docs), with the
 * same statuses. A type not listed here is `api_error`, Anthropic's word for a failure of its own.
 */
const ANTHROPIC_ERROR_TYPES = new Map([
  ['invalid_request_error', 'invalid_request_error'],
  ['method_not_allowed', 'invalid_request_error'],
  ['authentication_error', 'authentication_error'],
  ['insufficient_credits', 'billing_error'],
  ['permission_error', 'permission_error'],
  ['not_found', 'not_found_error'],
  ['request_timeout', 'timeout_error'],
  ['conflict', 'conflict_error'],
  ['request_too_large', 'request_too_large'],
  ['rate_limit_error', 'rate_limit_error'],
  // A model that cannot serve now, or a node shutting down: Anthropic's clients retry an overloaded API
  ['service_unavailable', 'overloaded_error'],
  ['internal_error', 'api_error']
])

/** Anthropic's error shape, for its dialect's routes: our envelope's message, its type in Anthropic's words. */
export function anthropicError (body: ErrorEnvelope, requestID: string): AnthropicErrorEnvelope {
  return {
    type: 'error',
    error: { type: ANTHROPIC_ERROR_TYPES.get(body.error.type) ?? 'api_error', message: anthropicMessages.get(body) ?? body.error.message },
    request_id: requestID
  }
}

export interface AnthropicErrorEnvelope {
  type: 'error'
  error: { type: string, message: string }
  request_id: string
}

/** The Responses API's route, whose streams tell a failure their own way (`streamErrorEvent`). */
const RESPONSES_ROUTE = '/v1/responses'

/**
 * The data of the `error` event that ends a stream of `request`'s in its route's dialect, as each dialect's SDK reads
 * it: Anthropic's error shape on its routes; on the Responses API its error event (`ResponseErrorEvent`, its `code`
 * our envelope's, else its type), numbered `sequence`; else our envelope, as OpenAI's chat stream has it.
 */
export function streamErrorEvent (envelope: ErrorEnvelope, request: FastifyRequest, sequence: number): unknown {
  if (request.routeOptions.config?.errorShape === 'anthropic') return anthropicError(envelope, request.id)
  if (request.routeOptions.url === RESPONSES_ROUTE) {
    const { code, type, message, param } = envelope.error
    return { type: 'error', code: code ?? type, message, param, sequence_number: sequence }
  }
  return envelope
}

/**
 * The headers that name a request, on every answer (docs/API.md, Conventions): `X-Request-Id`, and on Anthropic's
 * routes also its own `request-id`, which its SDKs read into an error's `requestID` and a message's `_request_id`.
 */
export function requestIDHeaders (request: FastifyRequest): Record<string, string> {
  return request.routeOptions.config?.errorShape === 'anthropic'
    ? { 'x-request-id': request.id, 'request-id': request.id }
    : { 'x-request-id': request.id }
}

/**
 * Node's own refusals, before fastify sees a request (headers over 16 KiB, headers or body too slow, bytes that are
 * not HTTP), in the same envelope, then the connection is closed. A client that already left gets nothing.
 */
export function clientErrorHandler (this: { log: FastifyBaseLogger }, err: NodeJS.ErrnoException, socket: Socket): void {
  if (isClientGone(err) || socket.destroyed) return
  const [status, type, message] = err.code === 'ERR_HTTP_REQUEST_TIMEOUT'
    ? [408, 'request_timeout', 'The request was not received in time']
    : err.code === 'HPE_HEADER_OVERFLOW'
      ? [431, 'request_too_large', 'The request line and headers are larger than 16 KiB']
      : [400, 'invalid_request_error', 'Malformed HTTP request']
  this.log.debug({ code: err.code, status }, 'connection refused before routing')
  if (socket.writable) {
    const body = JSON.stringify({ error: { message, type, param: null, code: null } })
    socket.write(`HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\nContent-Type: application/json\r\n` +
      `Content-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`)
  }
  socket.destroy()
}

/**
 * Unknown routes answer 404; a known path asked with another method answers 405 with `Allow`. `allowed`
 * says which methods a path has.
 */
export function notFoundHandler (allowed: (path: string) => string[]) {
  return (request: FastifyRequest, reply: FastifyReply): FastifyReply => {
    const path = request.url.split('?')[0]
    const allow = allowed(path)
    const err = allow.length > 0
      ? new MethodNotAllowedError(request.method, path, allow)
      : new NotFoundError(`Route not found: ${request.method} ${path}`)
    return errorHandler(err, request, reply)
  }
}
