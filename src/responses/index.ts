// What other layers (the composition root, the Responses API route) use of the stored-responses domain.
export {
  StoredResponses, MAX_STORED_RESPONSES, MAX_STORED_RESPONSE_BYTES, MAX_STORED_RESPONSES_TOTAL_BYTES, STORED_RESPONSE_TTL_MS
} from './stored-responses.ts'
export type { StoredResponse, StoredResponsesOptions } from './stored-responses.ts'
