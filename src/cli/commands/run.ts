// `meshnode run <model> [prompt]`, as `ollama run`: the first answer in one command. A model the node can serve
// already, itself or through a peer, is simply asked, as `chat --model` asks it; any other is made ready on the node
// (a file imported, a download with a progress bar, a load). Then it answers the prompt and exits, or chats.
import { existsSync, statSync } from 'node:fs'
import { homedir } from 'node:os'
import { join, resolve } from 'node:path'
import { createInterface } from 'node:readline'
import type { Command } from 'commander'
import type { AppSnapshot, ModelRecord } from '../../http/schemas/app.ts'
import type { ModelLoaded } from '../../http/schemas/models.ts'
import type { ModelList } from '../../http/schemas/openai.ts'
import { sameModel } from '../../models/index.ts'
import { streamChat, type ChatAnswer, type ChatMessage } from '../chat-stream.ts'
import type { ApiClient } from '../client.ts'
import { download } from '../model-download.ts'
import { print } from '../output.ts'
import { MAX_TOKENS_OPTION } from './chat.ts'
import { UsageError, clientFor, decimalNumberOption, wholeNumberOption, withClientOptions } from './common.ts'

interface RunOptions {
  system?: string
  maxTokens: number
  temperature?: number
  interactive?: boolean
}

/**
 * The most tokens one answer of `run` takes unless --max-tokens says otherwise, as llama.cpp's own command-line
 * tools cap theirs: a long answer fits, and a model that never says it is done (small ones often do not) stops here
 * instead of writing until its context is full.
 */
export const RUN_MAX_TOKENS = 1024

/** What `run --json` prints for each answer: one JSON object, like the other commands' --json. */
export interface RunAnswer {
  model: string
  answer: string
  /** `stop`, or `length` when --max-tokens cut the answer. */
  finish_reason: ChatAnswer['finishReason']
  usage: ChatAnswer['usage']
  /** `local` or `peer:<nodeID>`: who generated it. */
  served_by: string
}

const PROMPT = '>>> '
const REPL_HELP = 'Type a message and press Enter. /clear forgets the conversation, /bye (or Ctrl-D) leaves, Ctrl-C stops an answer.'

export function registerRun (program: Command): void {
  withClientOptions(program.command('run')
    .argument('<model>', 'a catalog id, hf.co/<org>/<repo>/<file>.gguf, an imported id, or a GGUF file on this machine')
    .argument('[prompt...]', 'ask this, print the answer and exit; without it, chat (in a terminal) or read the prompt from stdin')
    .option('--system <text>', 'a system message')
    .option('--max-tokens <n>', 'most tokens per answer', wholeNumberOption('--max-tokens', 1, MAX_TOKENS_OPTION), RUN_MAX_TOKENS)
    .option('--temperature <t>', 'sampling temperature, 0 to 2', decimalNumberOption('--temperature', 0, 2))
    .option('-i, --interactive', 'chat even when stdin is not a terminal (one message per line)')
    .description('answer a prompt or chat with a model, like ollama run: one this node or a peer serves is asked at once; ' +
      'any other is downloaded (if need be) and loaded here first. --json prints one JSON object per answer'))
    .action(async (model: string, words: string[], _options, command: Command) => {
      const { client, options } = clientFor(command)
      const run = command.opts<RunOptions>()
      const json = options.json === true
      const limitChosen = command.getOptionValueSource('maxTokens') !== 'default'
      const modelID = await ready(client, model, json)
      const system: ChatMessage[] = run.system == null ? [] : [{ role: 'system', content: run.system }]
      const ask = async (messages: ChatMessage[], signal?: AbortSignal): Promise<ChatAnswer> => {
        const answer = await streamChat(client,
          { model: modelID, messages: [...system, ...messages], maxTokens: run.maxTokens, temperature: run.temperature },
          { signal, onText: json ? undefined : (text) => { process.stdout.write(text) } })
        // Said only of the default limit: whoever chose one knows it
        if (!json && !limitChosen && answer.finishReason === 'length') {
          process.stderr.write(`\n[the answer reached ${run.maxTokens} tokens, the default limit; --max-tokens N allows more]`)
        }
        return answer
      }
      const asJson = (answer: ChatAnswer): RunAnswer =>
        ({ model: modelID, answer: answer.text, finish_reason: answer.finishReason, usage: answer.usage, served_by: answer.servedBy })

      if (words.length > 0 || (process.stdin.isTTY !== true && run.interactive !== true)) {
        const prompt = words.length > 0 ? words.join(' ') : (await readAll(process.stdin)).trim()
        if (prompt === '') throw new UsageError('nothing to ask: give a prompt, pipe one on stdin, or run this in a terminal to chat')
        const answer = await ask([{ role: 'user', content: prompt }])
        if (json) print(asJson(answer), true, () => '')
        else process.stdout.write('\n')
        return
      }
      // In a chat, --json writes each answer as one line of JSON, as it comes
      await chat(ask, json ? (answer) => { process.stdout.write(JSON.stringify(asJson(answer)) + '\n') } : null)
    })
}

/**
 * Returns the id to ask for `model`. A model only peers serve is asked through the node as it is, as `chat --model`
 * asks it. Otherwise it is made one of the node's loaded models: a file on this machine is imported first; a model
 * not downloaded is downloaded with the progress bar; then it is loaded beside the others, unless it is loaded already.
 */
async function ready (client: ApiClient, model: string, quiet: boolean): Promise<string> {
  const say = (text: string): void => { if (!quiet) process.stderr.write(text) }
  // A mistyped path is the command line's mistake, said as such: as an id it would only be refused as malformed
  const path = resolve(model.startsWith('~/') ? join(homedir(), model.slice(2)) : model)
  const file = isFile(path)
  if (!file && looksLikePath(model)) throw new UsageError(existsSync(path) ? `${model} is not a file` : `No file at ${model}`)
  let app = await client.get<AppSnapshot>('/v1/app') // first, so that no node here says so before anything else
  let modelID = model
  if (file) {
    const imported = await client.post<ModelRecord>('/v1/app/models/import', { path })
    modelID = imported.modelID
    say(`Imported ${path} as ${modelID}\n`)
  }
  // Any of the models the node holds: `app.model` is only the last one loaded, and loading another again is a waste
  const loadedHere = (): string | undefined => [
    ...app.models.filter((m) => m.status === 'loaded').map((m) => m.modelID),
    ...(app.model?.status === 'loaded' ? [app.model.modelID] : [])
  ].find((id) => sameModel(id, modelID))
  const already = loadedHere()
  if (already != null) return already
  // /v1/models lists the node's own models first: a model listed as a peer's is on no disk here, and asking the
  // peer beats downloading it
  const listed = (await client.get<ModelList>('/v1/models')).data.find((m) => sameModel(m.id, modelID))
  if (listed != null && listed.owned_by !== 'local') {
    say(`${listed.id} is served by ${listed.owned_by}; asking it through this node\n`)
    return listed.id
  }
  const record = await download(client, modelID, quiet) // answers at once for a model already here
  app = await client.get<AppSnapshot>('/v1/app')
  if (loadedHere() != null) return record.modelID
  say(`Loading ${record.modelID}...\n`)
  const loaded = await client.post<ModelLoaded>('/v1/app/models/load', { modelID: record.modelID })
  return loaded.modelID
}

/**
 * The interactive chat: streamed answers, the conversation kept for the next turn, /bye to leave. `onAnswer` (for
 * --json) gets each whole answer.
 */
async function chat (ask: (messages: ChatMessage[], signal?: AbortSignal) => Promise<ChatAnswer>, onAnswer: ((answer: ChatAnswer) => void) | null): Promise<void> {
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
        history.push({ role: 'assistant', content: answer.text })
        onAnswer?.(answer)
      } catch (err) {
        history.pop() // the question had no answer: asking again should not carry it twice
        process.stderr.write(`\nmeshnode: ${(err as Error).message}\n`)
      } finally {
        answering = null
      }
      if (onAnswer == null) process.stdout.write('\n\n')
    }
    if (terminal && !closed) lines.prompt()
  }
  lines.close()
}

/**
 * Whether `model` is meant as a file on this machine: a path (`./`, `../`, `/`, `~`) or a name ending in .gguf. A hub
 * id or URL (hf.co/<org>/<repo>/<file>.gguf) ends in .gguf too, and is an id.
 */
function looksLikePath (model: string): boolean {
  if (model.startsWith('.') || model.startsWith('/') || model.startsWith('~')) return true
  if (/^(?:[a-z]+:\/\/|(?:www\.)?(?:hf\.co|huggingface\.co)\/)/i.test(model)) return false
  return model.toLowerCase().endsWith('.gguf')
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
