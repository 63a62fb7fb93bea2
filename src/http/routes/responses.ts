// OpenAI's Responses API (what Codex, the OpenAI Agents SDK and `openai.responses.create` speak): the routes, and
// the kept responses `previous_response_id` continues. The request's translation to the one internal chat request is
// responses-request.ts's, the answer and its stream events responses-answer.ts's. Routing, the serving policy, the
// prefix cache, billing, peers and limits are the chat route's, unchanged.
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod'
import { NotFoundError } from '../../errors.ts'
import type { ChatEvent, ChatMessage, ChatRouter, RoutedGeneration } from '../../inference/index.ts'
import { keyedRequester } from '../../inference/index.ts'
import type { StoredResponses } from '../../responses/index.ts'
import { collectAnswer, streamGeneration, type StreamDialect } from '../generation-stream.ts'
import { requesterOf } from '../guards.ts'
import { ResponseAnswer, echo } from '../responses-answer.ts'
import { inClientTerms, toChatRequest } from '../responses-request.ts'
import { errorResponses } from '../schemas/common.ts'
import { DeletedResponse, ResponseObject, ResponseParams, ResponsesRequest } from '../schemas/responses.ts'
import { clientGone } from '../sse.ts'
import { ptnOf } from './chat.ts'
import { IGNORED_TOOLS_HEADER } from './messages.ts'

export interface ResponsesRoutesOptions {
  router: ChatRouter
  /** Where responses made with `store` (the default) are kept, for GET, DELETE and `previous_response_id`. */
  responses: StoredResponses
  onServed?: (modelID: string) => void
}

export const responsesRoutes: FastifyPluginAsyncZod<ResponsesRoutesOptions> = async (app, { router, responses, onServed }) => {
  app.post('/v1/responses', {
    schema: { summary: 'Create a response, streamed or not (OpenAI Responses)', tags: ['openai'], body: ResponsesRequest, response: { 200: ResponseObject, ...errorResponses } }
  }, async (request, reply) => {
    const body = request.body
    const requester = requesterOf(request.principal)
    const previous = body.previous_response_id == null ? null : continued(responses, body.previous_response_id, requester)
    const plan = toChatRequest(body, previous ?? [])
    if (plan.ignoredTools.length > 0) {
      void reply.header(IGNORED_TOOLS_HEADER, plan.ignoredTools.join(', '))
      request.log.info({ tools: plan.ignoredTools }, 'tools of kinds that cannot run here were left out of the prompt')
    }
    const signal = clientGone(reply)
    const generation = inClientTerms(
      // the cache key keeps this session's slot and saved prefixes apart; the kept responses stay the requester's
      router.route(plan.chat, { signal, ptnID: ptnOf(request.headers['x-ptn-id'], body.ptn), requester: keyedRequester(requester, body.prompt_cache_key) }) as RoutedGeneration<ChatEvent>,
      plan
    )
    const answer = new ResponseAnswer(echo(body))
    const keep = (response: ResponseObject): void => {
      if (!response.store) return
      const conversation = [...plan.conversation, answer.message()]
      response.store = responses.save({ id: response.id, requester, conversation, answer: response })
      if (!response.store) request.log.info({ response: response.id }, 'response too large to keep; answered without storing it')
    }

    if (body.stream !== true) {
      for (const event of await collectAnswer(generation, signal, reply, () => { onServed?.(plan.chat.modelID) })) {
        if (event.type === 'done') answer.finish(event)
        else answer.add(event)
      }
      keep(answer.response)
      return answer.response
    }

    const dialect: StreamDialect = { done: null, failure: (envelope) => answer.failed(envelope) }
    const served = await streamGeneration(reply, generation, {
      signal,
      dialect,
      opening: answer.opening(),
      render: (event) => {
        if (event.type !== 'done') return answer.add(event)
        const closing = answer.finish(event)
        keep(answer.response)
        return [...closing, answer.ended()]
      }
    })
    if (served) onServed?.(plan.chat.modelID)
    return reply
  })

  app.get('/v1/responses/:id', {
    schema: { summary: 'A kept response (OpenAI Responses)', tags: ['openai'], params: ResponseParams, response: { 200: ResponseObject, ...errorResponses } }
  }, async (request) => responses.get(request.params.id, requesterOf(request.principal)).answer as ResponseObject)

  app.delete('/v1/responses/:id', {
    schema: { summary: 'Delete a kept response (OpenAI Responses)', tags: ['openai'], params: ResponseParams, response: { 200: DeletedResponse, ...errorResponses } }
  }, async (request) => {
    responses.delete(request.params.id, requesterOf(request.principal))
    return { id: request.params.id, object: 'response' as const, deleted: true as const }
  })
}

/** The conversation a kept response ended, to continue; a 404 naming the id when there is none for this requester. */
function continued (responses: StoredResponses, id: string, requester: string): ChatMessage[] {
  try {
    return responses.get(id, requester).conversation
  } catch (err) {
    // Unknown, expired, deleted, stored with store:false, or another key's: all the same answer, which leaks nothing
    if (err instanceof NotFoundError) throw new NotFoundError(`previous_response_id ${id} names no kept response: it never existed, was deleted, expired, was made with store: false or with another API key`)
    throw err
  }
}
