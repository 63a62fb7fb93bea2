// verifySignature (src/identity/identity.ts) keeps the keys it has parsed, the most recently used: whatever it has seen
// before, a signature verifies only against its own key and bytes.
import assert from 'node:assert/strict'
import { test } from 'node:test'
import { generateSeed, identityFromSeed, verifySignature } from '../../src/identity/index.ts'
import { signCanonical } from '../../src/wire/index.ts'

const me = identityFromSeed(generateSeed())

test('signatures: checked against the right key whichever keys were seen before, more keys than are kept parsed', () => {
  const signers = Array.from({ length: 4200 }, () => identityFromSeed(generateSeed()))
  const data = new TextEncoder().encode('the same bytes, signed by each')
  const signatures = signers.map(identity => identity.sign(data))
  // Every key once (more than the 4,096 kept parsed), then the first ones again, after they were evicted.
  for (const [i, identity] of signers.entries()) assert.equal(verifySignature(identity.nodeID, data, signatures[i]), true)
  for (let i = 0; i < 10; i++) {
    assert.equal(verifySignature(signers[i].nodeID, data, signatures[i]), true)
    assert.equal(verifySignature(signers[i].nodeID, data, signatures[i + 1]), false, 'another key\'s signature')
    assert.equal(verifySignature(signers[i].publicKey, new TextEncoder().encode('other bytes'), signatures[i]), false)
  }
  assert.equal(verifySignature('00'.repeat(32), data, signatures[0]), false, 'a key that is not a curve point, or not the signer')
  assert.equal(verifySignature(me.nodeID, data, signCanonical(me, 'x')), false)
})
