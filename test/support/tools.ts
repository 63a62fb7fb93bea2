// Tools the tool tests offer the tiny model, and the check that a call's arguments are valid against their schema.
import assert from 'node:assert/strict'
import type OpenAI from 'openai'

type Tool = OpenAI.Chat.Completions.ChatCompletionFunctionTool

export const WEATHER: Tool = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'The weather in a city, for some days',
    parameters: {
      type: 'object',
      properties: { city: { type: 'string', enum: ['Paris', 'Tokyo', 'Lima'] }, days: { type: 'integer' }, metric: { type: 'boolean' } },
      required: ['city', 'days', 'metric']
    }
  }
}
export const CLOCK: Tool = {
  type: 'function',
  function: { name: 'get_time', description: 'The time in a zone', parameters: { type: 'object', properties: { zone: { enum: ['UTC', 'CET'] } }, required: ['zone'] } }
}
/** Checks arguments against WEATHER's or CLOCK's schema by hand: every required key, of its type, nothing else. */
export function assertValidArguments (name: string, text: string): Record<string, unknown> {
  const args = JSON.parse(text) as Record<string, unknown>
  if (name === 'get_weather') {
    assert.deepEqual(Object.keys(args).sort(), ['city', 'days', 'metric'])
    assert.ok(['Paris', 'Tokyo', 'Lima'].includes(args.city as string), text)
    assert.ok(Number.isInteger(args.days), text)
    assert.equal(typeof args.metric, 'boolean', text)
  } else {
    assert.equal(name, 'get_time')
    assert.deepEqual(Object.keys(args), ['zone'])
    assert.ok(['UTC', 'CET'].includes(args.zone as string), text)
  }
  return args
}
