// `meshnode run <model> [prompt]`, as `ollama run`: the first answer in one command. It makes the model ready on the
// node (imports a file, downloads with a progress bar, loads), then answers the prompt and exits, or chats.
import { existsSync, statSync } from 'node:fs'
import { resolve } from 'node:path'
import { createInterface } from 'node:readline'
import type { Command } from 'commander'
import type { AppSnapshot, ModelRecord } from '../../http/schemas/app.ts'
import type { ModelLoaded } from '../../http/schemas/models.ts'
import { sameModel } from '../../models/index.ts'
import { streamChat, type ChatMessage } from '../chat-stream.ts'
import type { ApiClient } from '../client.ts'
import { download } from '../model-download.ts'
import { MAX_TOKENS_OPTION } from './chat.ts'
import { UsageError, clientFor, decimalNumberOption, wholeNumberOption, withClientOptions } from './common.ts'

interface RunOptions {
  system?: string
  maxTokens?: number
  temperature?: number
  interactive?: boolean
}

const PROMPT = '>>> '
const REPL_HELP = 'Type a message and press Enter. /clear forgets the conversation, /bye (or Ctrl-D) leaves, Ctrl-C stops an answer.'

export function registerRun (program: Command): void {
  withClientOptions(program.command('run')
    .argument('<model>', 'a catalog id, hf.co/<org>/<repo>/<file>.gguf, an imported id, or a GGUF file on this machine')
    .argument('[prompt...]', 'ask this, print the answer and exit; without it, chat (in a terminal) or read the prompt from stdin')
    .option('--system <text>', 'a system message')
    .option('--max-tokens <n>', 'most tokens per answer', wholeNumberOption('--max-tokens', 1, MAX_TOKENS_OPTION))
    .option('--temperature <t>', 'sampling temperature, 0 to 2', decimalNumberOption('--temperature', 0, 2))
    .option('-i, --interactive', 'chat even when stdin is not a terminal (one message per line)')
    .description('download (if need be) and load a model, then answer a prompt or chat with it, like ollama run'))
    .action(async (model: string, words: string[], _options, command: Command) => {
      const { client, options } = clientFor(command)
      const run = command.opts<RunOptions>()
      const modelID = await ready(client, model, options.json === true)
      const system: ChatMessage[] = run.system == null ? [] : [{ role: 'system', content: run.system }]
      const ask = async (messages: ChatMessage[], signal?: AbortSignal): Promise<string> => (await streamChat(client,
        { model: modelID, messages: [...system, ...messages], maxTokens: run.maxTokens, temperature: run.temperature },
        { signal, onText: (text) => { process.stdout.write(text) } })).text

      if (words.length > 0 || (process.stdin.isTTY !== true && run.interactive !== true)) {
        const prompt = words.length > 0 ? words.join(' ') : (await readAll(process.stdin)).trim()
        if (prompt === '') throw new UsageError('nothing to ask: give a prompt, pipe one on stdin, or run this in a terminal to chat')
        await ask([{ role: 'user', content: prompt }])
        process.stdout.write('\n')
        return
      }
      await chat(ask)
    })
}

/**
 * Makes `model` the node's loaded model: a file on this machine is imported first; a model not downloaded is
 * downloaded with the progress bar; then it is loaded, unless it is loaded already. Returns its id.
 */
async function ready (client: ApiClient, model: string, quiet: boolean): Promise<string> {
  const say = (text: string): void => { if (!quiet) process.stderr.write(text) }
  let app = await client.get<AppSnapshot>('/v1/app') // first, so that no node here says so before anything else
  let modelID = model
  if (isFile(model)) {
    const imported = await client.post<ModelRecord>('/v1/app/models/import', { path: resolve(model) })
    modelID = imported.modelID
    say(`Imported ${resolve(model)} as ${modelID}\n`)
  }
  const loadedHere = (): boolean => app.model != null && sameModel(app.model.modelID, modelID)
  if (loadedHere() && app.model?.status === 'loaded') return app.model.modelID
  const record = await download(client, modelID, quiet) // answers at once for a model already here
  app = await client.get<AppSnapshot>('/v1/app')
  if (loadedHere() && app.model?.status === 'loaded') return record.modelID
  say(`Loading ${record.modelID}...\n`)
  const loaded = await client.post<ModelLoaded>('/v1/app/models/load', { modelID: record.modelID })
  return loaded.modelID
}

/** The interactive chat: streamed answers, the conversation kept for the next turn, /bye to leave. */
async function chat (ask: (messages: ChatMessage[], signal?: AbortSignal) => Promise<string>): Promise<void> {
  const terminal = process.stdin.isTTY === true
  const lines = createInterface({ input: process.stdin, output: process.stdout, terminal, prompt: PROMPT, historySize: 1000 })
  const history: ChatMessage[] = []
  let answering: AbortController | null = null
  let closed = false // input ended (Ctrl-D, or the end of a pipe): the lines read so far are still answered
  lines.once('close', () => { closed = true })
  lines.on('SIGINT', () => {
    if (answering != null) answering.abort() // stops this answer; the chat goes on
    else process.stdout.write(`\n${REPL_HELP}\n${PROMPT}`)
  })
  // On a pipe (-i) the answers alone are written: no help and no prompts between them
  if (terminal) {
    process.stdout.write(`${REPL_HELP}\n`)
    lines.prompt()
  }
  for await (const line of lines) {
    const text = line.trim()
    if (text === '/bye') break
    if (text === '/clear') {
      history.length = 0
      process.stdout.write('Conversation cleared.\n')
    } else if (text === '/?' || text === '/help') {
      process.stdout.write(`${REPL_HELP}\n`)
    } else if (text !== '') {
      history.push({ role: 'user', content: text })
      answering = new AbortController()
      try {
        const answer = await ask(history, answering.signal)
        history.push({ role: 'assistant', content: answer })
      } catch (err) {
        history.pop() // the question had no answer: asking again should not carry it twice
        process.stderr.write(`\nmeshnode: ${(err as Error).message}\n`)
      } finally {
        answering = null
      }
      process.stdout.write('\n\n')
    }
    if (terminal && !closed) lines.prompt()
  }
  lines.close()
}

function isFile (path: string): boolean {
  try {
    return existsSync(path) && statSync(path).isFile()
  } catch (err) {
    // an id is not a path: a name the file system cannot take (too long, say) is simply not a file
    if ((err as NodeJS.ErrnoException).code === 'ENAMETOOLONG') return false
    throw err
  }
}

async function readAll (stream: NodeJS.ReadableStream): Promise<string> {
  let text = ''
  for await (const chunk of stream) text += chunk.toString()
  return text
}
