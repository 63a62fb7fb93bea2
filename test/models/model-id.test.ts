import { test } from 'node:test'
import assert from 'node:assert/strict'
import { InvalidInputError } from '../../src/errors.ts'
import { CATALOG, modelKey, normaliseModelID, parseModelID, pickQuantFile, sameModel } from '../../src/models/index.ts'
import { quantsIn, describeHubFile } from '../../src/models/model-id.ts'

test('catalog ids match case-insensitively and keep their catalog spelling', () => {
  for (const entry of CATALOG) {
    assert.equal(normaliseModelID(entry.id.toUpperCase()), entry.id)
    assert.equal(normaliseModelID(`  ${entry.id}  `), entry.id)
    const ref = parseModelID(entry.id)
    assert.equal(ref.kind, 'catalog')
  }
})

test('every catalog entry is a well-formed hub file that parses back to itself', () => {
  const ids = new Set<string>()
  for (const entry of CATALOG) {
    assert.match(entry.id, /^[a-z0-9][a-z0-9._-]+$/)
    assert.ok(!ids.has(entry.id), `${entry.id} is unique`)
    ids.add(entry.id)
    assert.match(entry.file, /\.gguf$/)
    assert.equal(entry.sha256, null, 'no sha256 we have not checked ourselves')
    assert.ok(entry.file.toLowerCase().includes(entry.quantization.toLowerCase()), `${entry.file} is ${entry.quantization}`)
    // The same file named on the hub is the catalog entry, in every spelling a user may paste
    for (const spelling of [
      `hf.co/${entry.repo}/${entry.file}`,
      `huggingface.co/${entry.repo}/${entry.file}`,
      `https://huggingface.co/${entry.repo}/resolve/main/${entry.file}?download=true`,
      `https://huggingface.co/${entry.repo}/blob/main/${entry.file}`,
      `HF.CO/${entry.repo.toLowerCase()}/${entry.file.toLowerCase()}`,
      `hf.co/${entry.repo}:${entry.quantization.toLowerCase()}`
    ]) {
      assert.equal(normaliseModelID(spelling), entry.id, spelling)
    }
  }
})

test('hub files and quantizations outside the catalog get one canonical spelling', () => {
  assert.deepEqual(parseModelID('hf.co/meshnode-test/tiny-GGUF/tiny-f32.gguf'),
    { kind: 'hf-file', modelID: 'hf.co/meshnode-test/tiny-GGUF/tiny-f32.gguf', repo: 'meshnode-test/tiny-GGUF', file: 'tiny-f32.gguf' })
  assert.equal(normaliseModelID('https://hf.co/meshnode-test/tiny-GGUF/sub/dir/x.GGUF'), 'hf.co/meshnode-test/tiny-GGUF/sub/dir/x.GGUF')
  assert.deepEqual(parseModelID('huggingface.co/meshnode-test/tiny-GGUF:q8_0'),
    { kind: 'hf-quant', modelID: 'hf.co/meshnode-test/tiny-GGUF:Q8_0', repo: 'meshnode-test/tiny-GGUF', quant: 'Q8_0' })
  // No quantization named: the repo's default, found in its file list (Q4_K_M, then Q8_0, then the first file)
  assert.deepEqual(parseModelID('hf.co/meshnode-test/tiny-GGUF'),
    { kind: 'hf-quant', modelID: 'hf.co/meshnode-test/tiny-GGUF', repo: 'meshnode-test/tiny-GGUF', quant: null })
  assert.deepEqual(parseModelID('qwen-7b'), { kind: 'name', modelID: 'qwen-7b' })
  assert.deepEqual(parseModelID('Llama3:8B'), { kind: 'name', modelID: 'llama3:8b' })
})

test('sameModel and modelKey compare ids case-insensitively across spellings; garbage matches nothing', () => {
  assert.ok(sameModel('smollm2-135m-instruct-q8_0', 'hf.co/HuggingFaceTB/SmolLM2-135M-Instruct-GGUF/smollm2-135m-instruct-q8_0.gguf'))
  assert.ok(sameModel('hf.co/a/b/c.gguf', 'https://huggingface.co/A/B/C.gguf'))
  assert.ok(sameModel('hf.co/a/b', 'https://huggingface.co/A/B'))
  assert.ok(!sameModel('hf.co/a/b:q4_k_m', 'hf.co/a/b'), 'the default of a repo may be another quantization')
  assert.ok(!sameModel('hf.co/a/b:q4_k_m', 'hf.co/a/b:q8_0'))
  assert.ok(!sameModel('qwen-7b', 'qwen-8b'))
  assert.ok(!sameModel('../x', '../x'))
  assert.equal(modelKey('hf.co/Org/Repo/File.gguf'), 'hf.co/org/repo/file.gguf')
})

test('unsafe or malformed ids are refused as invalid input on modelID', () => {
  const bad: Array<[string, RegExp]> = [
    ['', /empty/],
    ['   ', /empty/],
    ['hf.co/../../etc/passwd.gguf', /not a hub user or repo name/],
    ['hf.co/org/repo/../../../x.gguf', /\. or \.\. segments/],
    ['hf.co/org/repo/./x.gguf', /\. or \.\. segments/],
    ['hf.co/org/..', /not a hub user or repo name/],
    ['hf.co/org/repo/a\\..\\b.gguf', /backslash/],
    ['hf.co/org/repo//x.gguf', /empty segment/],
    ['/etc/passwd', /use a catalog id/],
    ['../models/x.gguf', /use a catalog id/],
    ['org/repo/x.gguf', /use a catalog id/],
    ['C:\\models\\x.gguf', /backslash/],
    ['hf.co/org/repo/x\u0000.gguf', /control characters/],
    ['smollm2\n', /control characters/],
    ['hf.co/org/repo/x.bin', /must be a \.gguf/],
    ['hf.co/org/repo/x:y.gguf', /may not contain/],
    ['hf.co/org/repo/model-00001-of-00003.gguf', /split GGUF/],
    ['hf.co/org/repo:Q4 K', /not a quantization/],
    ['hf.co/org', /expected hf\.co/],
    ['hf.co/org/repo/resolve/v1.0/x.gguf', /only the main revision/],
    ['hf.co/-org/repo/x.gguf', /not a hub user or repo name/],
    ['x'.repeat(257), /longer than 256/],
    ['model with spaces', /letters, digits/]
  ]
  for (const [id, reason] of bad) {
    assert.throws(() => parseModelID(id), (err) => {
      assert.ok(err instanceof InvalidInputError, `${JSON.stringify(id)} is InvalidInputError`)
      assert.equal(err.param, 'modelID')
      assert.match(err.message, reason, JSON.stringify(id))
      return true
    })
  }
})

test('a quantization resolves to the one file that has it as a whole token', () => {
  const files = [
    'README.md', 'config.json',
    'Model-7B-Q4_K_M.gguf', 'Model-7B-Q4_K_S.gguf', 'Model-7B-Q4_K.gguf', 'model-7b.Q8_0.gguf', 'Model-7B-BF16.gguf',
    'Model-7B-F16.gguf', 'mmproj-Model-F16.gguf', 'big/Model-7B-Q6_K-00001-of-00002.gguf', 'sub/Model-7B-Q4_K_M.gguf'
  ]
  assert.equal(pickQuantFile(files, 'Q4_K_M'), 'Model-7B-Q4_K_M.gguf', 'the top-level one of two')
  assert.equal(pickQuantFile(files, 'q4_k'), 'Model-7B-Q4_K.gguf', 'not Q4_K_M or Q4_K_S')
  assert.equal(pickQuantFile(files, 'Q8_0'), 'model-7b.Q8_0.gguf')
  assert.equal(pickQuantFile(files, 'F16'), 'Model-7B-F16.gguf', 'not BF16, not the projector')
  assert.equal(pickQuantFile(files, 'Q6_K'), null, 'split files are not offered')
  assert.equal(pickQuantFile(files, 'Q2_K'), null)
  assert.deepEqual(quantsIn(files), ['BF16', 'F16', 'Q4_K', 'Q4_K_M', 'Q4_K_S', 'Q8_0'])
})

test('no quantization named: Q4_K_M, then Q8_0, then the first model file; sidecars (mmproj, mtp-, imatrix) never', () => {
  const sidecars = ['mmproj-Model-Q4_K_M.gguf', 'mtp-Model-Q8_0.gguf', 'Model.imatrix.gguf', 'imatrix.gguf']
  assert.equal(pickQuantFile(['model-Q8_0.gguf', 'model-Q4_K_M.gguf', ...sidecars], null), 'model-Q4_K_M.gguf')
  assert.equal(pickQuantFile(['model-Q6_K.gguf', 'model-Q8_0.gguf', ...sidecars], null), 'model-Q8_0.gguf')
  assert.equal(pickQuantFile(['sub/a-Q6_K.gguf', 'model-Q5_K_M.gguf', 'model-IQ4_XS.gguf', ...sidecars], null), 'model-IQ4_XS.gguf',
    'the first top-level file by name')
  assert.equal(pickQuantFile([...sidecars, 'README.md', 'big-00001-of-00002.gguf'], null), null, 'nothing but sidecars and splits')
  assert.equal(pickQuantFile(sidecars, 'Q4_K_M'), null, 'a projector is no model, even with the quantization in its name')
  assert.deepEqual(quantsIn(sidecars), [])
})

test('hub files outside the catalog are described from their names', () => {
  assert.deepEqual(describeHubFile('Qwen/Qwen2.5-0.5B-Instruct-GGUF', 'qwen2.5-0.5b-instruct-q4_k_m.gguf'),
    { name: 'Qwen2.5-0.5B-Instruct Q4_K_M', family: 'qwen2.5', parameters: '0.5B', quantization: 'Q4_K_M' })
  assert.deepEqual(describeHubFile('meshnode-test/tiny-GGUF', 'tiny.gguf'),
    { name: 'tiny', family: 'tiny', parameters: null, quantization: null })
})
