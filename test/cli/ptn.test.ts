import assert from 'node:assert/strict'
import { writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { test } from 'node:test'
import { runCli, type CliResult } from '../support/cli.ts'
import { startTestNode, tempDir, type TestNode } from '../support/node.ts'
import { readCaKeyHex } from '../support/ptn.ts'

/** `meshnode <args>` against `node`, with `input` on stdin when given. */
async function meshnode (node: TestNode, args: string[], input?: string): Promise<CliResult> {
  return await runCli([...args, '--url', node.node.url, '--data-dir', node.dataDir], { input })
}



test('meshnode ptn list/create/invite/issue-cert/join-with-cert/import-ca-key/leave/recover/promote-admin/join', async (t) => {
  const [admin, member] = await Promise.all([startTestNode(t), startTestNode(t)])

  const empty = await meshnode(admin, ['ptn', 'list'])
  assert.equal(empty.code, 0, empty.stderr)
  assert.match(empty.stdout, /No PTN memberships/)
  const created = JSON.parse((await meshnode(admin, ['ptn', 'create', 'lab', '--json'])).stdout)
  assert.equal(created.role, 'admin')
  const { ptnID } = created

  const [invite, cert, list] = await Promise.all([
    meshnode(admin, ['ptn', 'invite', ptnID]),
    meshnode(admin, ['ptn', 'issue-cert', ptnID, member.nodeID, '--role', 'consumer', '--json']),
    meshnode(admin, ['ptn', 'list'])
  ])
  assert.equal(invite.code, 0, invite.stderr)
  const inviteCode = invite.stdout.split('\n')[0]
  assert.match(inviteCode, /^[A-Za-z0-9_-]+$/)
  assert.match(list.stdout, new RegExp(`^${ptnID}\\s+lab\\s+admin\\s+[12]\\s+active$`, 'm'))
  const { certData, role } = JSON.parse(cert.stdout)
  assert.equal(role, 'consumer')
  assert.equal((await meshnode(admin, ['ptn', 'issue-cert', ptnID, member.nodeID, '--role', 'root'])).code, 2, 'a usage error (README, Exit codes)')

  const joined = await meshnode(member, ['ptn', 'join-with-cert', certData])
  assert.equal(joined.code, 0, joined.stderr)
  assert.match(joined.stdout, /Joined PTN "lab" .* as consumer; status active/)

  // Without a peer network, reaching another node is a 503 the CLI reports.
  const [redeemed, promote] = await Promise.all([
    meshnode(member, ['ptn', 'join', inviteCode]),
    meshnode(admin, ['ptn', 'promote-admin', ptnID, member.nodeID])
  ])
  assert.equal(redeemed.code, 1)
  assert.match(redeemed.stderr, /already a member .*\(HTTP 409\)/)
  assert.equal(promote.code, 1)
  assert.match(promote.stderr, /not reachable \(HTTP 503\)/)

  // The CA key comes from a file or stdin, never from an argument.
  const keyFile = join(await tempDir(t), 'ca.key')
  await writeFile(keyFile, readCaKeyHex(admin.dataDir, ptnID) + '\n', { mode: 0o600 })
  const wrong = await meshnode(member, ['ptn', 'import-ca-key', ptnID], 'ab'.repeat(32))
  assert.equal(wrong.code, 1)
  assert.match(wrong.stderr, /not the CA key .*\(HTTP 400\)/)
  const imported = await meshnode(member, ['ptn', 'import-ca-key', ptnID, '--key-file', keyFile])
  assert.equal(imported.code, 0, imported.stderr)
  assert.match(imported.stdout, /Imported the CA key/)

  const recovered = await meshnode(member, ['ptn', 'recover', ptnID, '--json'])
  assert.deepEqual(JSON.parse(recovered.stdout), { status: 'recovered', ptnID })
  const { body: { memberships } } = await member.api.get('/v1/app/ptn')
  assert.deepEqual(memberships.map((m: { role: string, status: string }) => [m.role, m.status]), [['admin', 'recovered']])

  // The admin never heard of the imported copy, so to it the key it holds is the last one.
  const refused = await meshnode(admin, ['ptn', 'leave', ptnID])
  assert.equal(refused.code, 1)
  assert.match(refused.stderr, /force.*\(HTTP 409\)/)
  const left = await meshnode(admin, ['ptn', 'leave', ptnID, '--force'])
  assert.equal(left.code, 0, left.stderr)
  assert.match(left.stdout, new RegExp(`Left PTN ${ptnID}`))
})
