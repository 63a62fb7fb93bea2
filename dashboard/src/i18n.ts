// The UI language (the `language` setting): `en` and `zh` complete; every other code the node accepts
// falls back to English for each string it lacks. No JSX here, so node's test runner can import it directly.
import { createContext, createElement, type ComponentChildren, type VNode } from 'preact'
import { useContext } from 'preact/hooks'
import { en, type MessageKey } from './messages/en.ts'
import { zh } from './messages/zh.ts'

export type { MessageKey }
export type Messages = Record<MessageKey, string>

/** Complete dictionaries by language code; a code missing here shows English. */
export const DICTIONARIES: Record<string, Partial<Messages>> = { en, zh }

/** `{name}` placeholders are replaced from `params`. */
export function translate (language: string, key: MessageKey, params: Record<string, string | number> = {}): string {
  const text = DICTIONARIES[language]?.[key] ?? DICTIONARIES[language.split('-')[0]]?.[key] ?? en[key] ?? key
  return text.replace(/\{(\w+)\}/g, (whole, name: string) => (name in params ? String(params[name]) : whole))
}

export type Translate = (key: MessageKey, params?: Record<string, string | number>) => string

const LanguageContext = createContext('en')

export function I18nProvider ({ language, children }: { language: string, children: ComponentChildren }): VNode {
  return createElement(LanguageContext.Provider, { value: language }, children) as VNode
}

export function useLanguage (): string {
  return useContext(LanguageContext)
}

export function useT (): Translate {
  const language = useLanguage()
  return (key, params) => translate(language, key, params)
}

/** Before sign-in the node's setting cannot be read: the browser's language, if we have it. */
export function browserLanguage (): string {
  const preferred = typeof navigator === 'undefined' ? 'en' : navigator.language
  return preferred.toLowerCase().startsWith('zh') ? 'zh' : 'en'
}
