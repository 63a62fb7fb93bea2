import { test } from 'node:test'
import assert from 'node:assert/strict'
import { InvalidGenerationRequestError } from '../../src/inference/index.ts'
import { toGrammarSchema } from '../../src/inference/grammar-schema.ts'

const ANY = {
  oneOf: [{ type: ['string', 'number', 'boolean', 'null'] }, { type: 'object', additionalProperties: true }, { type: 'array' }]
}

await test('schemas node-llama-cpp would misread are rewritten into its subset', () => {
  const cases: Array<[unknown, unknown]> = [
    [{ type: 'object', properties: { a: { type: 'integer' } }, required: ['a'] },
      { type: 'object', properties: { a: { type: 'integer' } }, required: ['a'], additionalProperties: false }],
    [{}, ANY], // "anything", not the `null` node-llama-cpp makes of it
    [{ type: 'object' }, { type: 'object', additionalProperties: true }],
    [{ anyOf: [{ type: 'string' }, { type: 'null' }] }, { oneOf: [{ type: 'string' }, { type: 'null' }] }],
    [{ type: ['string', 'null'] }, { type: ['string', 'null'] }],
    [{ type: ['string', 'null'], maxLength: 3 }, { oneOf: [{ type: 'string', maxLength: 3 }, { type: 'null' }] }],
    [{ properties: { x: { const: 1 } } }, { type: 'object', properties: { x: { const: 1 } }, additionalProperties: false }],
    [{ type: 'string', format: 'email', title: 'Email', description: 'where to write' }, { type: 'string' }],
    [{ $schema: 'https://json-schema.org/draft/2020-12/schema', definitions: { n: { type: 'number' } }, $ref: '#/definitions/n' },
      { oneOf: [{ $ref: '#/$defs/n' }], $defs: { n: { type: 'number' } } }]
  ]
  for (const [schema, expected] of cases) assert.deepEqual(toGrammarSchema(schema, 'schema'), expected, JSON.stringify(schema))
})

await test('schemas whose constraints the grammar cannot enforce are refused, naming the keyword', () => {
  const cases: Array<[unknown, string]> = [
    [null, 'schema'],
    [[], 'schema'],
    [{ type: 'banana' }, 'schema.type'],
    [{ type: 'string', pattern: '^a+$' }, 'schema.pattern'],
    [{ type: 'object', properties: { n: { type: 'number', minimum: 0 } } }, 'schema.properties.n.minimum'],
    [{ allOf: [{ type: 'string' }] }, 'schema.allOf'],
    [{ $ref: '#/$defs/missing' }, 'schema.$ref'],
    [{ type: 'array', items: { not: {} } }, 'schema.items.not'],
    [{ enum: [{ a: 1 }] }, 'schema.enum'],
    [{ type: 'string', maxLength: -1 }, 'schema.maxLength']
  ]
  for (const [schema, param] of cases) {
    assert.throws(() => toGrammarSchema(schema, 'schema'), (err: unknown) => {
      assert.ok(err instanceof InvalidGenerationRequestError, String(err))
      assert.equal(err.param, param, JSON.stringify(schema))
      return true
    })
  }
})

await test('a schema nested deeper than the limit is refused instead of recursing on', () => {
  let schema: object = { type: 'string' }
  for (let i = 0; i < 40; i++) schema = { type: 'array', items: schema }
  assert.throws(() => toGrammarSchema(schema, 'schema'), InvalidGenerationRequestError)
})
