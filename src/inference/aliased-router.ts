// A model's aliases (names a client insists on: models/aliases.ts) at the door of the HTTP API: a request naming an
// alias is routed as the model it stands for, and /v1/models lists each alias beside that model.
import type { ChatRouter, ModelListing } from './chat.ts'
import type { LocalRouter } from './local-router.ts'

export interface ModelAliasTable {
  /** The model `modelID` names: the one its alias stands for, or itself. */
  resolve (modelID: string): string
  list (): Array<{ alias: string, modelID: string }>
}

/** `router` with aliases resolved; an alias is listed as its model is (where it runs, whether it is loaded). */
export function aliasedRouter (router: ChatRouter, aliases: ModelAliasTable, sameModel: (a: string, b: string) => boolean): ChatRouter {
  return {
    route: (request, options) => router.route({ ...request, modelID: aliases.resolve(request.modelID) }, options),
    models: () => {
      const listed = router.models()
      const named: ModelListing[] = []
      for (const { alias, modelID } of aliases.list()) {
        const target = listed.find((model) => sameModel(model.modelID, modelID))
        if (target != null) named.push({ ...target, modelID: alias })
      }
      return [...listed, ...named]
    }
  }
}

type Tokenizer = Pick<LocalRouter, 'tokenize' | 'detokenize' | 'countChatTokens'>

/** The node's tokenizer with aliases resolved, as the router's. */
export function aliasedTokenizer (tokenizer: Tokenizer, aliases: ModelAliasTable): Tokenizer {
  return {
    tokenize: async (modelID, text, options) => await tokenizer.tokenize(aliases.resolve(modelID), text, options),
    detokenize: async (modelID, tokens, options) => await tokenizer.detokenize(aliases.resolve(modelID), tokens, options),
    countChatTokens: async (request, options) => await tokenizer.countChatTokens({ ...request, modelID: aliases.resolve(request.modelID) }, options)
  }
}
