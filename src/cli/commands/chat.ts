import type { Command } from 'commander'
import { firstModel, streamChat } from '../chat-stream.ts'
import { clientFor, decimalNumberOption, wholeNumberOption, withClientOptions } from './common.ts'

/** The most tokens the CLI lets one ask for; the node caps it at the model's context anyway. */
export const MAX_TOKENS_OPTION = 1_000_000

interface ChatOptions {
  model?: string
  system?: string
  maxTokens?: number
  temperature?: number
  ptn?: string
}

export function registerChat (program: Command): void {
  withClientOptions(program.command('chat')
    .argument('<prompt...>', 'what to ask')
    .description('ask the node (or, through it, a peer) and stream the answer as it is generated')
    .option('--model <id>', 'model to use (default: the first one /v1/models lists, local first)')
    .option('--system <text>', 'a system message')
    .option('--max-tokens <n>', 'most tokens to generate', wholeNumberOption('--max-tokens', 1, MAX_TOKENS_OPTION))
    .option('--temperature <t>', 'sampling temperature, 0 to 2', decimalNumberOption('--temperature', 0, 2))
    .option('--ptn <ptnID>', 'run only on this node or members of this PTN'))
    .action(async (words: string[], _options, command: Command) => {
      const { client, options } = clientFor(command)
      const chat = command.opts<ChatOptions>()
      const model = chat.model ?? await firstModel(client)
      const abort = new AbortController()
      process.once('SIGINT', () => { abort.abort() }) // Ctrl-C: the node stops generating when we hang up
      const answer = await streamChat(client, {
        model,
        messages: [...(chat.system == null ? [] : [{ role: 'system' as const, content: chat.system }]), { role: 'user', content: words.join(' ') }],
        maxTokens: chat.maxTokens,
        temperature: chat.temperature,
        ptn: chat.ptn
      }, {
        signal: abort.signal,
        ...(options.json === true
          ? { onData: (data) => { process.stdout.write(data + '\n') } }
          : { onText: (text) => { process.stdout.write(text) } })
      })
      if (options.json === true || abort.signal.aborted) return
      process.stdout.write('\n')
      if (answer.usage != null) process.stderr.write(`\n[${model} on ${answer.servedBy}: ${answer.usage.prompt_tokens} prompt + ${answer.usage.completion_tokens} completion tokens]\n`)
    })
}
