import type { Command } from 'commander'
import type { ChatCompletionChunk, ModelList } from '../../http/schemas/openai.ts'
import { readSse } from '../sse.ts'
import { clientFor, withClientOptions } from './common.ts'

interface ChatOptions {
  model?: string
  system?: string
  maxTokens?: string
  temperature?: string
  ptn?: string
}

export function registerChat (program: Command): void {
  withClientOptions(program.command('chat')
    .argument('<prompt...>', 'what to ask')
    .description('ask the node (or, through it, a peer) and stream the answer as it is generated')
    .option('--model <id>', 'model to use (default: the first one /v1/models lists, local first)')
    .option('--system <text>', 'a system message')
    .option('--max-tokens <n>', 'most tokens to generate')
    .option('--temperature <t>', 'sampling temperature, 0 to 2')
    .option('--ptn <ptnID>', 'run only on this node or members of this PTN'))
    .action(async (words: string[], _options, command: Command) => {
      const { client, options } = clientFor(command)
      const chat = command.opts<ChatOptions>()
      const model = chat.model ?? await firstModel(client.get.bind(client))
      const body = {
        model,
        messages: [...(chat.system == null ? [] : [{ role: 'system', content: chat.system }]), { role: 'user', content: words.join(' ') }],
        stream: true,
        stream_options: { include_usage: true },
        ...(chat.maxTokens == null ? {} : { max_tokens: Number(chat.maxTokens) }),
        ...(chat.temperature == null ? {} : { temperature: Number(chat.temperature) }),
        ...(chat.ptn == null ? {} : { ptn: chat.ptn })
      }
      const abort = new AbortController()
      process.once('SIGINT', () => { abort.abort() })
      const response = await client.fetch('POST', '/v1/chat/completions', body, abort.signal)
      const servedBy = response.headers.get('x-served-by') ?? 'unknown'
      let usage: ChatCompletionChunk['usage'] = null
      try {
        for await (const { data } of readSse(response)) {
          if (data === '[DONE]') break
          const event = JSON.parse(data) as ChatCompletionChunk | { error: { message: string } }
          if ('error' in event) throw new Error(event.error.message)
          if (options.json === true) {
            process.stdout.write(data + '\n')
            continue
          }
          const text = event.choices[0]?.delta.content
          if (text != null) process.stdout.write(text)
          if (event.usage != null) usage = event.usage
        }
      } catch (err) {
        if (abort.signal.aborted) return // Ctrl-C: the node stops generating when we hang up
        throw err
      }
      if (options.json !== true) {
        process.stdout.write('\n')
        if (usage != null) process.stderr.write(`\n[${model} on ${servedBy}: ${usage.prompt_tokens} prompt + ${usage.completion_tokens} completion tokens]\n`)
      }
    })
}

async function firstModel (get: <T>(path: string) => Promise<T>): Promise<string> {
  const models = await get<ModelList>('/v1/models')
  const local = models.data.find((m) => m.owned_by === 'local') ?? models.data[0]
  if (local == null) throw new Error('No model is loaded here and no peer offers one. Load one with: meshnode models load <id>')
  return local.id
}
