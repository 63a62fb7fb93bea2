import { test } from 'node:test'
import assert from 'node:assert/strict'
import { InvalidGenerationRequestError } from '../../src/inference/index.ts'
import type { GbnfJsonSchema } from 'node-llama-cpp'
import { getSharedLlama } from '../../src/inference/llama.ts'
import {
  MAX_ALTERNATIVES, MAX_OUTPUT_CHECK_STEPS, MAX_PATTERN_CHECK_MS, MAX_REF_NESTING, MAX_SCHEMA_PATTERNS, MAX_SCHEMA_REPETITIONS, MAX_SCHEMA_SUBSCHEMAS, MAX_SCHEMA_VALUES, toOutputSchema, type OutputSchema
} from '../../src/inference/grammar-schema.ts'

/** The grammar made of `schema`. */
function toGrammarSchema (schema: unknown, param: string): GbnfJsonSchema {
  return toOutputSchema(schema, param).grammar
}

/** The check of `value` against what the grammar of `schema` does not enforce. */
function outputViolation (schema: unknown, value: unknown, at?: string): string | null {
  return toOutputSchema(schema, 'schema').violation(value, at)
}

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
    [{ type: 'string', pattern: '^(a+)+$' }, 'schema.pattern'],
    [{ type: 'string', pattern: '[' }, 'schema.pattern'],
    [{ type: 'object', properties: { n: { type: 'number', minimum: 'zero' } } }, 'schema.properties.n.minimum'],
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
  // Nor deeper through $refs: a chain of definitions, each nesting the next (node-llama-cpp's writer recurses down it)
  const chain = (n: number): object => ({ $ref: '#/$defs/d0', $defs: Object.fromEntries(Array.from({ length: n }, (_, i) => [`d${i}`, i === n - 1 ? { type: 'string' } : { type: 'object', properties: { next: { $ref: `#/$defs/d${i + 1}` } } }])) })
  assert.doesNotThrow(() => toGrammarSchema(chain(MAX_REF_NESTING / 2 - 1), 'schema'))
  assert.throws(() => toGrammarSchema(chain(2000), 'schema'), (err: unknown) =>
    err instanceof InvalidGenerationRequestError && err.param === 'schema' && /nests deeper than 128 levels through its \$refs/.test(err.message))
  // A recursive definition is counted once
  assert.doesNotThrow(() => toGrammarSchema({ $ref: '#/$defs/node', $defs: { node: { type: 'object', properties: { children: { type: 'array', items: { $ref: '#/$defs/node' } } } } } }, 'schema'))
  // Nor larger than MAX_SCHEMA_SUBSCHEMAS, its definitions included
  const wide = (n: number): object => ({ type: 'object', properties: Object.fromEntries(Array.from({ length: n }, (_, i) => [`p${i}`, { type: 'string' }])) })
  assert.doesNotThrow(() => toGrammarSchema(wide(MAX_SCHEMA_SUBSCHEMAS - 1), 'schema'))
  assert.throws(() => toGrammarSchema(wide(MAX_SCHEMA_SUBSCHEMAS), 'schema'), (err: unknown) =>
    err instanceof InvalidGenerationRequestError && err.param === 'schema.properties' && /more than 4096 subschemas/.test(err.message))
  // A megabyte of keys is refused after a walk of the bound's length, before any pass over the schema
  const keys = Object.fromEntries(Array.from({ length: 100_000 }, (_, i) => [`x${i}`, {}]))
  for (const unenforceable of ['refuse', 'leave out'] as const) {
    assert.throws(() => toOutputSchema({ type: 'object', ...keys }, 'schema', { unenforceable }), (err: unknown) =>
      err instanceof InvalidGenerationRequestError && err.param === 'schema' && new RegExp(`more than ${MAX_SCHEMA_VALUES} JSON values`).test(err.message))
  }
  // A value of any JSON costs node-llama-cpp as much as 32 others: 127 fit beside their object, 128 do not
  const free = (n: number, value: unknown): object => ({ type: 'object', properties: Object.fromEntries(Array.from({ length: n }, (_, i) => [`p${i}`, value])) })
  assert.doesNotThrow(() => toGrammarSchema(free(127, true), 'schema'))
  assert.throws(() => toGrammarSchema(free(128, {}), 'schema'), /more than 4096 subschemas \(a value of any JSON counts 32\)/)
  assert.throws(() => toGrammarSchema({ ...free(2047, true), $defs: Object.fromEntries(Array.from({ length: 2046 }, (_, i) => [`d${i}`, true])) }, 'schema'), /more than 4096 subschemas/)
})

await test('bounds and patterns the grammar cannot express are checked on the output, wherever they sit in the schema', () => {
  // As zod writes them (the safe-integer range on every integer), and as Claude Code's tools have them
  const schema = {
    type: 'object',
    properties: {
      offset: { type: 'integer', minimum: 0, maximum: 9007199254740991 },
      limit: { type: 'integer', exclusiveMinimum: 0 },
      id: { type: 'string', pattern: '^wf_[a-z0-9-]{6,}$' },
      scores: { type: 'array', items: { $ref: '#/$defs/score' } },
      either: { anyOf: [{ type: 'number', maximum: 1 }, { type: 'string' }] }
    },
    $defs: { score: { type: 'number', minimum: 0, exclusiveMaximum: 10 } }
  }
  assert.doesNotThrow(() => toGrammarSchema(schema, 'schema'))
  const valid = { offset: 0, limit: 1, id: 'wf_abc-123', scores: [0, 9.5], either: 'x' }
  assert.equal(outputViolation(schema, valid, 'answer'), null)
  const cases: Array<[object, RegExp]> = [
    [{ offset: -1 }, /answer\.offset is -1, below the minimum 0/],
    [{ limit: 0 }, /answer\.limit is 0, not above 0/],
    [{ id: 'wf_ab' }, /answer\.id does not match the pattern/],
    [{ scores: [1, 10] }, /answer\.scores\[1\] is 10, not below 10/],
    [{ either: 2 }, /answer\.either is 2, above the maximum 1/]
  ]
  for (const [change, message] of cases) assert.match(outputViolation(schema, { ...valid, ...change }, 'answer') ?? '', message)
})

await test('an integer between near bounds is written out, so the grammar itself holds it within them', () => {
  assert.deepEqual(toGrammarSchema({ type: 'integer', minimum: 1, maximum: 5 }, 'schema'), { enum: [1, 2, 3, 4, 5] })
  assert.deepEqual(toGrammarSchema({ type: 'integer', exclusiveMinimum: 0, exclusiveMaximum: 4 }, 'schema'), { enum: [1, 2, 3] })
  // Far bounds (zod's safe-integer range) or one bound only: the integer grammar, checked on the output
  assert.deepEqual(toGrammarSchema({ type: 'integer', minimum: -9007199254740991, maximum: 9007199254740991 }, 'schema'), { type: 'integer' })
  assert.deepEqual(toGrammarSchema({ type: 'integer', minimum: 0 }, 'schema'), { type: 'integer' })
  assert.throws(() => toGrammarSchema({ type: 'integer', minimum: 3, maximum: 2 }, 'schema'), (err: unknown) => err instanceof InvalidGenerationRequestError && err.param === 'schema')
})

await test('string formats: the grammar writes dates, the output is checked for email, uuid, uri, hostname and ipv4, any other is refused', () => {
  assert.deepEqual(toGrammarSchema({ type: 'string', format: 'date' }, 'schema'), { type: 'string', format: 'date' })
  const schema = { type: 'object', properties: { mail: { type: 'string', format: 'email' }, id: { type: 'string', format: 'uuid' }, link: { type: 'string', format: 'uri' } } }
  assert.deepEqual(toGrammarSchema(schema, 'schema'), { type: 'object', properties: { mail: { type: 'string' }, id: { type: 'string' }, link: { type: 'string' } }, additionalProperties: false })
  assert.equal(outputViolation(schema, { mail: 'a@b.co', id: '123e4567-e89b-12d3-a456-426614174000', link: 'https://x.example/y' }), null)
  assert.match(outputViolation(schema, { mail: 'nobody' }, 'answer') ?? '', /answer\.mail is not a valid email/)
  assert.match(outputViolation(schema, { id: 'x' }, 'answer') ?? '', /answer\.id is not a valid uuid/)
  assert.throws(() => toGrammarSchema({ type: 'string', format: 'iri-reference' }, 'schema'), (err: unknown) => err instanceof InvalidGenerationRequestError && err.param === 'schema.format')
})

await test('a number between two bounds is written out on a grid of at least 100 steps, so the grammar holds the bounds', () => {
  const unit = toGrammarSchema({ type: 'number', minimum: 0, maximum: 1 }, 'schema') as { enum: number[] }
  assert.equal(unit.enum.length, 101)
  assert.deepEqual([unit.enum[0], unit.enum[1], unit.enum[55], unit.enum.at(-1)], [0, 0.01, 0.55, 1])
  const open = toGrammarSchema({ type: 'number', exclusiveMinimum: 0, exclusiveMaximum: 10 }, 'schema') as { enum: number[] }
  assert.deepEqual([open.enum[0], open.enum.at(-1), open.enum.length], [0.1, 9.9, 99])
  const wide = toGrammarSchema({ type: 'number', minimum: -50, maximum: 150 }, 'schema') as { enum: number[] }
  assert.deepEqual([wide.enum[0], wide.enum[1], wide.enum.at(-1), wide.enum.length], [-50, -49, 150, 201])
  assert.deepEqual(toGrammarSchema({ type: 'number', minimum: 0 }, 'schema'), { type: 'number' })
  assert.throws(() => toGrammarSchema({ type: 'number', minimum: 1, exclusiveMaximum: 1 }, 'schema'), InvalidGenerationRequestError)
})

await test('bounds too close for their magnitude, or equal, end at once: checked on the output, or the one value', () => {
  // A step finer than the bounds' magnitude can count: the grid is given up for the output check, never looped on
  for (const schema of [
    { type: 'number', exclusiveMinimum: 1_000_000, maximum: 1_000_000.00000001 },
    { type: 'number', exclusiveMinimum: 1e15, maximum: 1e15 + 0.5 },
    { type: 'number', minimum: 0, maximum: 1e-200 }
  ]) {
    assert.deepEqual(toGrammarSchema(schema, 'schema'), { type: 'number' }, JSON.stringify(schema))
  }
  assert.match(outputViolation({ type: 'number', exclusiveMinimum: 1_000_000, maximum: 1_000_000.00000001 }, 1_000_000, 'answer') ?? '', /not above 1000000/)
  assert.deepEqual(toGrammarSchema({ type: 'number', minimum: 1, maximum: 1 }, 'schema'), { enum: [1] })
  assert.deepEqual(toGrammarSchema({ type: 'number', minimum: 0.5, maximum: 0.5 }, 'schema'), { enum: [0.5] })
})

await test('an answer whose check would fan out without end stops at the step bound and is refused, naming why', () => {
  // Each level offers four objects around the next and the last breaks its bound: 4^30 paths, had every one been
  // walked (llama.cpp sees four alternatives at each place, all starting with `{`)
  const levels = 30
  const $defs: Record<string, unknown> = {}
  for (let i = 0; i < levels; i++) $defs[`d${i}`] = { anyOf: Array.from({ length: 4 }, () => ({ type: 'object', properties: { a: { $ref: `#/$defs/d${i + 1}` } } })) }
  $defs[`d${levels}`] = { type: 'integer', maximum: 0 }
  const schema = { $ref: '#/$defs/d0', $defs }
  assert.doesNotThrow(() => toGrammarSchema(schema, 'schema'))
  let value: unknown = 5
  for (let i = 0; i < levels; i++) value = { a: value }
  assert.match(outputViolation(schema, value, 'answer') ?? '', new RegExp(`answer could not be checked against the schema: it takes more than ${MAX_OUTPUT_CHECK_STEPS} steps`))
  // A matching value goes through the first way at every level
  let good: unknown = 0
  for (let i = 0; i < levels; i++) good = { a: good }
  assert.equal(outputViolation(schema, good, 'answer'), null)
  // Alternatives that multiply where llama.cpp sets them up (anyOfs of $refs nested: 4^30 parse stacks) are refused
  const multiplied: Record<string, unknown> = {}
  for (let i = 0; i < levels; i++) multiplied[`d${i}`] = { anyOf: Array.from({ length: 4 }, () => ({ $ref: `#/$defs/d${i + 1}` })) }
  multiplied[`d${levels}`] = { type: 'integer' }
  assert.throws(() => toGrammarSchema({ type: 'object', properties: { a: { $ref: '#/$defs/d0' } }, $defs: multiplied }, 'schema'), /alternatives at one place/)
})

await test('a pattern that backtracks without end is stopped by the time bound; the answer is refused, naming why', () => {
  for (const pattern of ['^' + '.*'.repeat(10) + '!$', '^(a|a)*$']) {
    const schema = { type: 'object', properties: { text: { type: 'string', pattern } } }
    assert.doesNotThrow(() => toGrammarSchema(schema, 'schema'), pattern)
    const answer = { text: 'a'.repeat(40) + 'b, and some more words so that the match has a long way to go' }
    assert.match(outputViolation(schema, answer, 'answer') ?? '', new RegExp(`could not be checked against the schema: its patterns take more than ${MAX_PATTERN_CHECK_MS} ms`), pattern)
  }
  // The bound is the answer's, not each string's: many strings cannot add up to more
  const many = { type: 'array', items: { type: 'string', pattern: '^(a|a)*$' } }
  assert.match(outputViolation(many, Array.from({ length: 50 }, () => 'a'.repeat(40) + 'b'), 'answer') ?? '', /its patterns take more than/)
  // Plain patterns still decide
  const plain = { type: 'string', pattern: '^[a-z]+$' }
  assert.equal(outputViolation(plain, 'abc'), null)
  assert.match(outputViolation(plain, 'ABC', 'answer') ?? '', /answer does not match the pattern/)
})

await test('counts past the grammar budget, or too large for llama.cpp to bound, are left out of the grammar and checked on the output', async () => {
  const object = (n: number, property: (i: number) => object): Record<string, unknown> =>
    ({ type: 'object', properties: Object.fromEntries(Array.from({ length: n }, (_, i) => [`p${i}`, property(i)])) })
  const grammarOf = (schema: unknown): Record<string, Record<string, unknown>> =>
    (toGrammarSchema(schema, 'schema') as { properties: Record<string, Record<string, unknown>> }).properties
  // Distinct bounds, each written out as its own rules by llama.cpp: the first ones fit the budget, the rest are
  // checked on the output; identical ones are one rule, written again at no cost
  const distinct = object(200, (i) => ({ type: 'string', maxLength: 1000 - (i % 100) }))
  assert.deepEqual(grammarOf(distinct).p0, { type: 'string', maxLength: 1000 })
  assert.deepEqual(grammarOf(distinct).p99, { type: 'string' })
  assert.deepEqual(grammarOf(distinct).p100, { type: 'string', maxLength: 1000 })
  assert.equal(outputViolation(distinct, { p0: 'a', p99: 'b'.repeat(902) }, 'answer'), 'answer.p99 has 902 characters, more than maxLength 901')
  assert.equal(outputViolation(distinct, { p99: '😀'.repeat(901) }, 'answer'), null, 'a length is counted in code points')
  assert.equal(outputViolation(distinct, { p99: '😀'.repeat(902) }, 'answer'), 'answer.p99 has 902 characters, more than maxLength 901')
  // The same goes for items and properties, and a range or grid past it is checked on the output as any number
  const counted = { type: 'object', properties: { big: distinct, list: { type: 'array', items: { type: 'integer', minimum: 0, maximum: 255 }, minItems: 2, maxItems: 1500 }, bag: { type: 'object', maxProperties: 1 } } }
  assert.deepEqual(grammarOf(counted).list, { type: 'array', items: { type: 'integer' }, minItems: 2 })
  assert.equal(outputViolation(counted, { list: [1, 2, 256] }, 'answer'), 'answer.list[2] is 256, above the maximum 255')
  assert.equal(outputViolation(counted, { list: [1, 2], bag: { a: 1, b: 2 } }, 'answer'), 'answer.bag has 2 properties, more than maxProperties 1')
  assert.equal(outputViolation(counted, { list: [1, 2, 3], bag: { a: 1 } }, 'answer'), null)
  // A most count past what llama.cpp bounds is the output's to check, budget or not
  const long = { type: 'object', properties: { text: { type: 'string', maxLength: 5000 }, list: { type: 'array', items: { type: 'number' }, minItems: 1, maxItems: 1500 } } }
  assert.deepEqual(grammarOf(long), { text: { type: 'string' }, list: { type: 'array', items: { type: 'number' }, minItems: 1 } })
  assert.equal(outputViolation(long, { text: 'x'.repeat(5001), list: [1] }, 'answer'), 'answer.text has 5001 characters, more than maxLength 5000')
  assert.equal(outputViolation(long, { text: 'x', list: Array.from({ length: 1501 }, () => 1) }, 'answer'), 'answer.list has 1501 items, more than maxItems 1500')
  assert.equal(outputViolation(long, { text: 'x'.repeat(5000), list: [1] }, 'answer'), null)
  // Ordinary schemas are far inside the budget: identical string bounds are one rule, a least and a most count one cost
  for (const schema of [
    object(200, () => ({ type: 'string', maxLength: 1000 })),
    object(30, (i) => ({ type: 'string', minLength: 900 + i, maxLength: 970 + i }))
  ]) {
    assert.ok(Object.values(grammarOf(schema)).every((property) => 'maxLength' in property), JSON.stringify(schema).slice(0, 80))
  }
  // Listed values cannot be checked on the output: past the budget an enum is refused, naming it
  const values = (n: number, tag = ''): string[] => Array.from({ length: n }, (_, i) => `value_${i}${tag}`)
  assert.throws(() => toGrammarSchema(object(9, (i) => ({ enum: values(1000, `_${i}`) })), 'schema'), (err: unknown) =>
    err instanceof InvalidGenerationRequestError && err.param === 'schema.properties.p8.enum' && err.message.includes(`more than ${MAX_SCHEMA_REPETITIONS} in all`))
  // At one place llama.cpp tries every alternative for every token: at most MAX_ALTERNATIVES, an enum's or an anyOf's
  assert.doesNotThrow(() => toGrammarSchema({ enum: values(MAX_ALTERNATIVES) }, 'schema'))
  assert.throws(() => toGrammarSchema(object(1, () => ({ enum: values(MAX_ALTERNATIVES + 1) })), 'schema'), (err: unknown) =>
    err instanceof InvalidGenerationRequestError && err.param === 'schema.properties.p0.enum' && /lists 1025 values/.test(err.message))
  assert.throws(() => toGrammarSchema({ ...object(1, () => ({ anyOf: [{ enum: values(600) }, { $ref: '#/$defs/more' }] })), $defs: { more: { enum: values(600, '!') } } }, 'schema'), (err: unknown) =>
    err instanceof InvalidGenerationRequestError && err.param === 'schema' && /1200 alternatives at one place/.test(err.message))
  // And llama.cpp compiles every grammar made so, at the edges of what it bounds
  const llama = await getSharedLlama(1)
  for (const schema of [
    distinct, counted, long,
    { type: 'string', maxLength: 2000 }, { type: 'string', minLength: 1000, maxLength: 1000 },
    { type: 'array', items: { type: 'number' }, minItems: 1000, maxItems: 1000 }, { type: 'array', prefixItems: [{ type: 'string' }], items: { type: 'number' }, maxItems: 1002 },
    { type: 'array', items: { type: 'number' }, maxItems: 2001 }, { type: 'object', minProperties: 1000, maxProperties: 2000 },
    { type: 'array', prefixItems: [{ type: 'string' }], items: { type: 'integer' }, maxItems: 668 }, { type: 'array', prefixItems: [{ type: 'null' }], minItems: 1000 },
    { type: 'object', properties: { a: { type: 'string' } }, additionalProperties: true, maxProperties: 1000 },
    { type: 'object', properties: { a: { type: 'string' } }, additionalProperties: { type: 'integer' }, minProperties: 666, maxProperties: 666 }
  ]) {
    await assert.doesNotReject(llama.createGrammarForJsonSchema<GbnfJsonSchema>(toGrammarSchema(schema, 'schema')), JSON.stringify(schema).slice(0, 120))
  }
})

await test('patterns: the thousands of strings of one answer are matched together, within one deadline; an anyOf goes on to the next alternative', () => {
  const ids = { type: 'array', items: { type: 'string', pattern: '^[A-Z]{2}[0-9]{4}$' } }
  const many = Array.from({ length: 20_000 }, (_, i) => `AB${String(i % 10_000).padStart(4, '0')}`)
  assert.equal(outputViolation(ids, many, 'answer'), null)
  assert.equal(outputViolation(ids, [...many, 'ab1234'], 'answer'), 'answer[20000] does not match the pattern ^[A-Z]{2}[0-9]{4}$')
  // An alternative whose pattern does not match sends the check on to the next one, as often as the answer needs
  const either = { type: 'array', items: { anyOf: [{ type: 'string', pattern: '^a' }, { type: 'string', pattern: '^b' }, { type: 'integer', maximum: 3 }] } }
  assert.equal(outputViolation(either, [...Array.from({ length: 5000 }, (_, i) => i % 2 === 0 ? 'apple' : 'banana'), 2], 'answer'), null)
  assert.equal(outputViolation(either, ['apple', 'cherry'], 'answer'), 'answer[1] does not match the pattern ^a')
  // Nested alternatives, each one level further than the last walk saw
  let nested: object = { type: 'string', pattern: '^z' }
  for (const letter of 'yxwvutsr') nested = { anyOf: [{ type: 'string', pattern: `^${letter}` }, nested] }
  assert.equal(outputViolation(nested, 'zebra', 'answer'), null)
  assert.equal(outputViolation(nested, 'quail', 'answer'), 'answer does not match the pattern ^r')
})

await test('an answer is walked only where the schema holds something the grammar did not enforce', () => {
  const huge = Array.from({ length: MAX_OUTPUT_CHECK_STEPS * 3 }, (_, i) => ({ id: i, name: 'n' }))
  // Nothing to check anywhere: no walk at all, however large the answer
  const plain = { type: 'array', items: { type: 'object', properties: { id: { type: 'integer' }, name: { type: 'string', maxLength: 5 } } } }
  assert.equal(outputViolation(plain, huge, 'answer'), null)
  // Something to check beside it: the large part is passed over, the checked part still decides
  const beside = { type: 'object', properties: { rows: plain, score: { type: 'number', minimum: 0 } } }
  assert.equal(outputViolation(beside, { rows: huge, score: 1 }, 'answer'), null)
  assert.equal(outputViolation(beside, { rows: huge, score: -1 }, 'answer'), 'answer.score is -1, below the minimum 0')
  // Where the value went through one of several alternatives, every alternative's types still decide which
  const alternatives = { anyOf: [{ type: 'object', properties: { a: { type: 'string' } } }, { type: 'object', properties: { a: { type: 'integer', maximum: 5 } } }] }
  assert.equal(outputViolation(alternatives, { a: 7 }, 'answer'), 'answer.a is not of type string')
  assert.equal(outputViolation(alternatives, { a: 'seven' }, 'answer'), null)
})

await test('within an anyOf, every keyword decides which alternative the value went through, the grammar\'s own too', () => {
  const startsWithA = { type: 'string', pattern: '^a' }
  assert.equal(outputViolation({ anyOf: [startsWithA, { const: 'zzz' }] }, 'zzz', 'answer'), null)
  assert.equal(outputViolation({ anyOf: [startsWithA, { const: 'zzz' }] }, 'b', 'answer'), 'answer does not match the pattern ^a')
  assert.equal(outputViolation({ anyOf: [startsWithA, { enum: ['x', 'y'] }] }, 'b', 'answer'), 'answer does not match the pattern ^a')
  assert.equal(outputViolation({ anyOf: [startsWithA, { type: 'string', maxLength: 3 }] }, 'bb', 'answer'), null)
  assert.equal(outputViolation({ anyOf: [startsWithA, { type: 'string', maxLength: 3 }] }, 'bbbbbbb', 'answer'), 'answer does not match the pattern ^a')
  // Objects: by their properties, named, required or not
  const objects = { anyOf: [{ properties: { a: { type: 'string' } } }, { type: 'object', properties: { b: { type: 'integer', maximum: 5 } }, required: ['b'] }] }
  assert.equal(outputViolation(objects, { b: 7 }, 'answer'), 'answer has a property b the schema does not name')
  assert.equal(outputViolation(objects, { b: 3 }, 'answer'), null)
  assert.equal(outputViolation(objects, { a: 'x' }, 'answer'), null)
  // A required property the schema does not name: checked where others are allowed, a contradiction where they are not
  const loose = { type: 'object', properties: { a: { type: 'string' } }, additionalProperties: true, required: ['a', 'b'] }
  assert.equal(outputViolation(loose, { a: 'x' }, 'answer'), 'answer has no property b')
  assert.equal(outputViolation(loose, { a: 'x', b: 1 }, 'answer'), null)
  assert.throws(() => toGrammarSchema({ ...loose, additionalProperties: false }, 'schema'), (err: unknown) =>
    err instanceof InvalidGenerationRequestError && err.param === 'schema.required' && /requires b/.test(err.message))
  // Listed values of another type than the schema's are not offered; none left, or a const of another type, is refused
  assert.deepEqual(toGrammarSchema({ type: 'string', enum: ['a', 1, null] }, 'schema'), { enum: ['a'] })
  assert.throws(() => toGrammarSchema({ type: 'string', enum: [1] }, 'schema'), /lists no value of the schema's type/)
  assert.throws(() => toGrammarSchema({ type: 'integer', const: 'x' }, 'schema'), /is not of the schema's type/)
  // A date's lengths are the output's to check: node-llama-cpp writes its shape without them
  assert.deepEqual(toGrammarSchema({ type: 'string', format: 'date', maxLength: 4 }, 'schema'), { type: 'string', format: 'date' })
  assert.equal(outputViolation({ type: 'string', format: 'date', maxLength: 4 }, '2024-01-01', 'answer'), 'answer has 10 characters, more than maxLength 4')
  // A recursive schema's answer is checked however deep the model nested it
  const tree = { $ref: '#/$defs/node', $defs: { node: { type: 'object', properties: { n: { type: 'integer', minimum: 0 }, child: { $ref: '#/$defs/node' } } } } }
  let deep: Record<string, unknown> = { n: -1 }
  for (let i = 0; i < 100; i++) deep = { n: i, child: deep }
  assert.match(outputViolation(tree, deep, 'answer') ?? '', /^answer(\.child){100}\.n is -1, below the minimum 0$/)
  // A property named __proto__ is a property
  const proto = { type: 'object', properties: JSON.parse('{"__proto__": {"type": "string"}}') as object, required: ['__proto__'] }
  assert.deepEqual(Object.keys((toGrammarSchema(proto, 'schema') as { properties: object }).properties), ['__proto__'])
})

await test('patterns: many distinct ones, and alternatives matched only by their last, still check in a few walks', () => {
  const patterned = (n: number): Record<string, unknown> => ({ type: 'object', properties: Object.fromEntries(Array.from({ length: n }, (_, i) => [`p${i}`, { type: 'array', items: { type: 'string', pattern: `^x${i}_[0-9]+$` } }])) })
  const answer = Object.fromEntries(Array.from({ length: MAX_SCHEMA_PATTERNS }, (_, i) => [`p${i}`, Array.from({ length: 40 }, (_, j) => `x${i}_${j}`)]))
  assert.equal(outputViolation(patterned(MAX_SCHEMA_PATTERNS), answer, 'answer'), null)
  assert.throws(() => toGrammarSchema(patterned(MAX_SCHEMA_PATTERNS + 1), 'schema'), (err: unknown) =>
    err instanceof InvalidGenerationRequestError && err.param === `schema.properties.p${MAX_SCHEMA_PATTERNS}.items.pattern`)
  const fourth = { type: 'array', items: { anyOf: ['^a', '^b', '^c', '^d'].map((pattern) => ({ type: 'string', pattern })) } }
  assert.equal(outputViolation(fourth, Array.from({ length: 2000 }, (_, i) => `d${i}`), 'answer'), null)
  assert.equal(outputViolation(fourth, ['a', 'e'], 'answer'), 'answer[1] does not match the pattern ^a')
  // Where one alternative's type alone admits the value, its plain parts are passed over as anywhere else
  const rows = { anyOf: [{ type: 'object', properties: { rows: { type: 'array', items: { type: 'integer' } }, score: { type: 'number', minimum: 0 } } }, { type: 'null' }] }
  assert.equal(outputViolation(rows, { rows: Array.from({ length: MAX_OUTPUT_CHECK_STEPS * 2 }, (_, i) => i), score: 1 }, 'answer'), null)
  // A pattern the screen reads in one pass, however it nests: accepted or refused by its shape
  assert.doesNotThrow(() => toGrammarSchema({ type: 'string', pattern: '\\(+'.repeat(300) }, 'schema'))
  assert.doesNotThrow(() => toGrammarSchema({ type: 'string', pattern: '^(?:abc)*$' }, 'schema'))
  for (const pattern of ['^((a+))*$', '^(\\d{2,3})+$', '^(a|[b*])(c+)*$', '^(\\w*\\d)*$', '^((a|b)+)*$', '^(?<n>a+)+$']) {
    assert.throws(() => toGrammarSchema({ type: 'string', pattern }, 'schema'), /repeated group that itself repeats/, pattern)
  }
  // What real schemas hold is taken: groups delimited by a literal, exact counts, bounded repetitions, \p{…} classes
  // (IPv4, DNS-1123 names, zod's email and base64, slugs, colours, versions, semver, emoji)
  for (const pattern of [
    '^((25[0-5]|2[0-4]\\d|[01]?\\d\\d?)\\.){3}(25[0-5]|2[0-4]\\d|[01]?\\d\\d?)$',
    '^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$',
    "^(?!\\.)(?!.*\\.\\.)([A-Za-z0-9_'+\\-\\.]*)[A-Za-z0-9_+-]@([A-Za-z0-9][A-Za-z0-9\\-]*\\.)+[A-Za-z]{2,}$",
    '^(?:[0-9a-zA-Z+/]{4})*(?:|(?:[0-9a-zA-Z+/]{2}==)|(?:[0-9a-zA-Z+/]{3}=))$',
    '^[a-z0-9]+(?:-[a-z0-9]+)*$', '^#([0-9a-fA-F]{3}){1,2}$', '^\\d+(\\.\\d+)*$',
    '^(0|[1-9]\\d*)\\.(0|[1-9]\\d*)\\.(0|[1-9]\\d*)(?:-((?:0|[1-9]\\d*|\\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\\.(?:0|[1-9]\\d*|\\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?$',
    '^(\\p{Extended_Pictographic}|\\p{Emoji_Component})+$'
  ]) {
    assert.doesNotThrow(() => toGrammarSchema({ type: 'string', pattern }, 'schema'), pattern)
  }
  assert.equal(outputViolation({ type: 'string', pattern: '^[a-z0-9]+(?:-[a-z0-9]+)*$' }, 'a-slug-2', 'answer'), null)
})


await test('a tool\'s parameters: keywords the grammar cannot enforce are left out, of the grammar and the check alike; the limits still refuse', async () => {
  const leftOut = (schema: unknown): OutputSchema => toOutputSchema(schema, 'tools.0.function.parameters', { unenforceable: 'leave out' })
  // pydantic's described reference, `{allOf: [{$ref}], description}`, weighs what its reference does: as many fit as
  // plain references do
  const described = (n: number): object => ({
    type: 'object',
    properties: Object.fromEntries(Array.from({ length: n }, (_, i) => [`p${i}`, { allOf: [{ $ref: '#/$defs/word' }], description: `field ${i}` }])),
    $defs: { word: { type: 'string' } }
  })
  assert.doesNotThrow(() => leftOut(described(MAX_SCHEMA_SUBSCHEMAS - 2)))
  // As zod v4 writes z.record(z.string(), z.string()), and a tuple: the record's values are held, its keys are any
  const record = { type: 'object', propertyNames: { type: 'string' }, additionalProperties: { type: 'string' } }
  assert.deepEqual(leftOut(record).grammar, { type: 'object', additionalProperties: { type: 'string' } })
  const tuple = { type: 'array', prefixItems: [{ type: 'string' }, { type: 'number' }], items: false, minItems: 2, maxItems: 2 }
  assert.deepEqual(leftOut(tuple).grammar, { type: 'array', prefixItems: [{ type: 'string' }, { type: 'number' }], minItems: 2, maxItems: 2 })
  assert.deepEqual(leftOut({ type: 'array', prefixItems: [{ type: 'string' }], items: false }).grammar, { type: 'array', prefixItems: [{ type: 'string' }], maxItems: 1 })
  const schema = {
    type: 'object',
    properties: {
      tags: { type: 'array', items: { type: 'string' }, uniqueItems: true, contains: { const: 'x' } },
      step: { type: 'number', multipleOf: 5 },
      mode: { not: { type: 'null' } },
      both: { allOf: [{ type: 'string' }, { minLength: 1 }] },
      id: { allOf: [{ $ref: '#/$defs/id' }], description: 'a $ref described, as pydantic writes it' },
      self: { $ref: '#' },
      expression: { type: 'string', format: 'regex' },
      code: { type: 'string', pattern: '^zq[0-9]$', if: { minLength: 1 }, then: { maxLength: 3 } },
      mail: { type: 'string', anyOf: [{ format: 'email' }, { format: 'uuid' }] },
      dialect: { type: 'string', pattern: '^a\\-b$' }
    },
    allOf: [{ required: ['mode'] }],
    dependentRequired: { tags: ['step'] },
    $defs: { id: { type: 'integer', minimum: 1, maximum: 3 } }
  }
  // response_format (the default) refuses them, naming the first
  assert.throws(() => toGrammarSchema(schema, 'schema'), (err: unknown) => err instanceof InvalidGenerationRequestError && err.param === 'schema.allOf')
  const kept = leftOut(schema)
  const properties = (kept.grammar as unknown as { oneOf: Array<{ properties: Record<string, unknown> }> }).oneOf[0].properties
  assert.deepEqual(properties.tags, { type: 'array', items: { type: 'string' } })
  assert.deepEqual(properties.step, { type: 'number' })
  assert.deepEqual(properties.mode, ANY)
  assert.deepEqual(properties.both, ANY)
  assert.deepEqual(properties.id, { $ref: '#/$defs/id' })
  assert.deepEqual(properties.self, ANY)
  assert.deepEqual(properties.expression, { type: 'string' })
  assert.deepEqual(properties.mail, { oneOf: [{ type: 'string' }, { type: 'string' }] })
  // What was left out is not checked on the output either; what the grammar leaves to the check still is
  const valid = { tags: ['a', 'a'], step: 7, mode: null, both: 3, id: 2, self: [], expression: '(', code: 'zq1', mail: 'a@b.co', dialect: 'x' }
  assert.equal(kept.violation(valid, 'arguments'), null)
  assert.equal(kept.violation({ ...valid, code: 'zq10' }, 'arguments'), 'arguments.code does not match the pattern ^zq[0-9]$')
  assert.equal(kept.violation({ ...valid, mail: 'nobody' }, 'arguments'), 'arguments.mail is not a valid email')
  const llama = await getSharedLlama(1)
  for (const compiled of [record, tuple, schema]) await assert.doesNotReject(llama.createGrammarForJsonSchema<GbnfJsonSchema>(leftOut(compiled).grammar))

  // The limits against hostile schemas, a malformed keyword and a schema no value holds are refused as before
  const free = (n: number, value: unknown): object => ({ type: 'object', properties: Object.fromEntries(Array.from({ length: n }, (_, i) => [`p${i}`, value])) })
  assert.doesNotThrow(() => leftOut(free(127, { not: {} })))
  assert.throws(() => leftOut(free(128, { not: {} })), /more than 4096 subschemas \(a value of any JSON counts 32\)/)
  let deep: object = { type: 'string' }
  for (let i = 0; i < 40; i++) deep = { allOf: [deep] }
  assert.throws(() => leftOut(deep), /nests deeper than 32 levels/)
  const cases: Array<[unknown, string]> = [
    [{ type: 'string', pattern: '^(a+)+$' }, 'tools.0.function.parameters.pattern'],
    [{ type: 'string', minLength: 100_000 }, 'tools.0.function.parameters.minLength'],
    [{ type: 'string', maxLength: -1 }, 'tools.0.function.parameters.maxLength'],
    [{ type: 'banana' }, 'tools.0.function.parameters.type'],
    [{ type: 'string', const: 1 }, 'tools.0.function.parameters.const'],
    [{ enum: Array.from({ length: 2000 }, (_, i) => i) }, 'tools.0.function.parameters.enum']
  ]
  for (const [refused, param] of cases) {
    assert.throws(() => leftOut(refused), (err: unknown) => err instanceof InvalidGenerationRequestError && err.param === param, JSON.stringify(refused).slice(0, 80))
  }
  const patterns = { type: 'object', properties: Object.fromEntries(Array.from({ length: MAX_SCHEMA_PATTERNS + 1 }, (_, i) => [`p${i}`, { type: 'string', pattern: `^a{${i}}$`, uniqueItems: true }])) }
  assert.throws(() => leftOut(patterns), /more than 256 distinct patterns/)
})
