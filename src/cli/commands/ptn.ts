import { readFileSync } from 'node:fs'
import { InvalidArgumentError, type Command } from 'commander'
import type {
  CertificateResult, CreatedPtn, Imported, Invite, Joined, Left, MembershipList, Promoted, Recovered
} from '../../http/schemas/ptn.ts'
import { formatTable, print } from '../output.ts'
import { clientFor, withClientOptions } from './common.ts'

const ROLES = ['admin', 'provider', 'consumer']

export function registerPtn (program: Command): void {
  const ptn = program.command('ptn').description('private trusted networks: create, invite, join, certificates, admins')

  withClientOptions(ptn.command('list').description('list this node\'s PTN memberships'))
    .action(async (_options, command: Command) => {
      const { client, options } = clientFor(command)
      const list = await client.get<MembershipList>('/v1/app/ptn')
      print(list, options.json, () => list.memberships.length === 0
        ? 'No PTN memberships. Create one with: meshnode ptn create NAME'
        : formatTable(['ptnID', 'name', 'role', 'members', 'status'],
          list.memberships.map((m) => [m.ptnID, m.name, m.role, m.members, m.status])))
    })

  withClientOptions(ptn.command('create').argument('<name>').description('create a PTN; this node becomes its admin and CA'))
    .action(async (name: string, _options, command: Command) => {
      const { client, options } = clientFor(command)
      const created = await client.post<CreatedPtn>('/v1/app/ptn/create', { name })
      print(created, options.json, () => `Created PTN "${created.name}" (${created.ptnID}); this node is its ${created.role}.`)
    })

  withClientOptions(ptn.command('invite').argument('<ptnID>').description('make a one-time invite code, valid for an hour'))
    .action(async (ptnID: string, _options, command: Command) => {
      const { client, options } = clientFor(command)
      const invite = await client.post<Invite>('/v1/app/ptn/invite', { ptnID })
      print(invite, options.json, () => `${invite.inviteCode}\n\nOne-time invite code, valid for 1 hour. The joining node runs: meshnode ptn join CODE`)
    })

  withClientOptions(ptn.command('join').argument('<inviteCode>').description('join a PTN with an invite code (asks the inviting admin over the peer network)'))
    .action(async (inviteCode: string, _options, command: Command) => {
      const { client, options } = clientFor(command)
      const joined = await client.post<Joined>('/v1/app/ptn/join', { inviteCode })
      print(joined, options.json, () => describeJoined(joined))
    })

  withClientOptions(ptn.command('issue-cert').argument('<ptnID>').argument('<nodeID>')
    .option('--role <role>', `role in the PTN: ${ROLES.join(', ')}`, parseRole, 'provider')
    .description('sign a membership certificate for a node (admins only)'))
    .action(async (ptnID: string, nodeID: string, _options, command: Command) => {
      const { client, options } = clientFor(command)
      const role = command.opts<{ role: string }>().role
      const cert = await client.post<CertificateResult>('/v1/app/ptn/issue-cert', { ptnID, nodeID, role })
      print(cert, options.json, () => `${cert.certData}\n\nCertificate for ${cert.nodeID} as ${cert.role}. That node runs: meshnode ptn join-with-cert CERT`)
    })

  withClientOptions(ptn.command('join-with-cert').argument('<certData>').description('join a PTN with a certificate an admin issued for this node'))
    .action(async (certData: string, _options, command: Command) => {
      const { client, options } = clientFor(command)
      const joined = await client.post<Joined>('/v1/app/ptn/join-with-cert', { certData })
      print(joined, options.json, () => describeJoined(joined))
    })

  withClientOptions(ptn.command('leave').argument('<ptnID>')
    .option('--force', 'leave even if this node holds the only known copy of the CA key (it is deleted)')
    .description('leave a PTN: removes the certificate and tells the reachable admins'))
    .action(async (ptnID: string, _options, command: Command) => {
      const { client, options } = clientFor(command)
      const force = command.opts<{ force?: boolean }>().force === true
      const left = await client.post<Left>('/v1/app/ptn/leave', { ptnID, force })
      print(left, options.json, () => `Left PTN ${left.ptnID}.`)
    })

  withClientOptions(ptn.command('promote-admin').argument('<ptnID>').argument('<nodeID>')
    .description('make a member an admin: sends it an admin certificate and the CA key over the encrypted peer connection'))
    .action(async (ptnID: string, nodeID: string, _options, command: Command) => {
      const { client, options } = clientFor(command)
      const promoted = await client.post<Promoted>('/v1/app/ptn/promote-admin', { ptnID, nodeID })
      print(promoted, options.json, () => `${promoted.nodeID} is now an ${promoted.role} of PTN ${ptnID}.`)
    })

  // The key is read from a file or stdin, never taken as an argument: arguments end up in shell history and `ps`.
  withClientOptions(ptn.command('import-ca-key').argument('<ptnID>')
    .option('--key-file <path>', 'file holding the hex CA private key (default: read it from stdin)')
    .description('restore or take over CA authority of a PTN this node is a member of'))
    .action(async (ptnID: string, _options, command: Command) => {
      const { client, options } = clientFor(command)
      const keyFile = command.opts<{ keyFile?: string }>().keyFile
      const caKeyHex = readFileSync(keyFile ?? 0, 'utf8').trim()
      const imported = await client.post<Imported>('/v1/app/ptn/import-ca-key', { ptnID, caKeyHex })
      print(imported, options.json, () => `Imported the CA key of PTN ${imported.ptnID}; this node can issue certificates.`)
    })

  withClientOptions(ptn.command('recover').argument('<ptnID>')
    .description('re-establish a membership: re-signed with the CA key if held, else by a reachable admin'))
    .action(async (ptnID: string, _options, command: Command) => {
      const { client, options } = clientFor(command)
      const recovered = await client.post<Recovered>('/v1/app/ptn/recover', { ptnID })
      print(recovered, options.json, () => `Membership of PTN ${recovered.ptnID} recovered.`)
    })
}

function describeJoined (joined: Joined): string {
  return `Joined PTN "${joined.name}" (${joined.ptnID}) as ${joined.role}; status ${joined.status}.`
}

function parseRole (value: string): string {
  if (!ROLES.includes(value)) throw new InvalidArgumentError(`expected one of ${ROLES.join(', ')}`)
  return value
}
