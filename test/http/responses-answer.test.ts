// The Responses API's translator on its own: how a failure after the stream opened is told.
import assert from 'node:assert/strict'
import { test } from 'node:test'
import { ResponseAnswer, echo } from '../../src/http/responses-answer.ts'
import type { ResponsesRequest } from '../../src/http/schemas/responses.ts'

test('a failure after a Responses stream opened keeps context_length_exceeded, the code Codex compacts its history on; others map to the API\'s codes', () => {
  const failed = (type: string, code: string | null): unknown => {
    const answer = new ResponseAnswer(echo({ model: 'm', input: 'hi' } as ResponsesRequest))
    answer.opening()
    const event = answer.failed({ error: { message: 'm', type, param: null, code } })
    assert.equal(event.event, 'response.failed')
    return (event.data as { response: { error: { code: string } } }).response.error.code
  }
  assert.equal(failed('invalid_request_error', 'context_length_exceeded'), 'context_length_exceeded')
  assert.equal(failed('invalid_request_error', null), 'invalid_prompt')
  assert.equal(failed('rate_limit_error', null), 'rate_limit_exceeded')
  assert.equal(failed('service_unavailable', null), 'server_error')
})
