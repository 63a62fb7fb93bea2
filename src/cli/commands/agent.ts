import type { Command } from 'commander'
import type {
  AgentProfile, ConversationDetail, ConversationList, Directory, SendMessageResult
} from '../../http/schemas/agent.ts'
import { formatPairs, formatTable, print } from '../output.ts'
import { clientFor, withClientOptions } from './common.ts'

export function registerAgent (program: Command): void {
  const agent = program.command('agent').description('this node\'s agent: profile, the directory of peers\' agents, conversations')

  withClientOptions(agent.command('profile').description('show the agent profile, or change it with the options')
    .option('--name <name>', 'the agent\'s name')
    .option('--capability <capability>', 'a capability (repeat for several; replaces the list)', collect)
    .option('--no-capabilities', 'clear the capabilities')
    .option('--system-prompt <text>', 'how the agent answers (an empty string restores the default)'))
    .action(async (_options, command: Command) => {
      const { client, options } = clientFor(command)
      const given = command.opts<{ name?: string, capability?: string[], capabilities: boolean, systemPrompt?: string }>()
      const patch: Record<string, unknown> = {}
      if (given.name !== undefined) patch.name = given.name
      if (given.capability !== undefined) patch.capabilities = given.capability
      else if (!given.capabilities) patch.capabilities = []
      if (given.systemPrompt !== undefined) patch.systemPrompt = given.systemPrompt
      const profile = Object.keys(patch).length === 0
        ? await client.get<AgentProfile>('/v1/app/agent/profile')
        : await client.patch<AgentProfile>('/v1/app/agent/profile', patch)
      print(profile, options.json, () => formatPairs([
        ['node', profile.nodeID],
        ['name', profile.name],
        ['capabilities', profile.capabilities.length === 0 ? null : profile.capabilities.join(', ')],
        ['model', profile.model],
        ['status', profile.status],
        ['system prompt', profile.systemPrompt === '' ? '(default)' : profile.systemPrompt]
      ]))
    })

  withClientOptions(agent.command('directory').description('list the agents of this node\'s peers')
    .option('--capability <capability>', 'only agents with this capability'))
    .action(async (_options, command: Command) => {
      const { client, options } = clientFor(command)
      const capability = command.opts<{ capability?: string }>().capability
      const query = capability === undefined ? '' : `?capability=${encodeURIComponent(capability)}`
      const directory = await client.get<Directory>(`/v1/app/agent/directory${query}`)
      print(directory, options.json, () => directory.agents.length === 0
        ? 'No agents. Peers\' agents appear here once this node has peers (meshnode peers).'
        : formatTable(['node', 'name', 'status', 'model', 'capabilities'],
          directory.agents.map((a) => [a.nodeID, a.name, a.status, a.model, a.capabilities.join(', ')])))
    })

  withClientOptions(agent.command('conversations').argument('[id]', 'show this conversation\'s messages')
    .description('list conversations with peers\' agents, or show one'))
    .action(async (id: string | undefined, _options, command: Command) => {
      const { client, options } = clientFor(command)
      if (id === undefined) {
        const list = await client.get<ConversationList>('/v1/app/agent/conversations')
        print(list, options.json, () => list.conversations.length === 0
          ? 'No conversations. Start one with: meshnode agent send <peerID> <message>'
          : formatTable(['id', 'peer', 'peer name', 'messages', 'last message'],
            list.conversations.map((c) => [c.id, c.peerID, c.peerName, c.messageCount, c.lastMessage])))
        return
      }
      const detail = await client.get<ConversationDetail>(`/v1/app/agent/conversations/${encodeURIComponent(id)}`)
      print(detail, options.json, () => [
        `Conversation ${detail.id} with ${detail.peerName} (${detail.peerID}), ${detail.messageCount} messages`,
        ...detail.messages.map((m) => `\n[${m.created}] ${m.from === detail.peerID ? detail.peerName : 'this node'} (${m.role}):\n${m.content}`)
      ].join('\n'))
    })

  withClientOptions(agent.command('send').argument('<peerID>').argument('<message>')
    .option('--conversation <id>', 'continue this conversation (a new one is started without it)')
    .description('send a message to a peer\'s agent and print its answer'))
    .action(async (peerID: string, message: string, _options, command: Command) => {
      const { client, options } = clientFor(command)
      const conversationID = command.opts<{ conversation?: string }>().conversation
      const result = await client.post<SendMessageResult>('/v1/app/agent/conversations', { peerID, message, conversationID })
      print(result, options.json, () =>
        `${result.conversation.peerName}: ${result.reply.content}\n(conversation ${result.conversation.id}, ${result.conversation.messageCount} messages)`)
    })
}

function collect (value: string, previous: string[] | undefined): string[] {
  return [...(previous ?? []), value]
}
