export { SettingsStore, SettingsPatch, DEFAULT_SETTINGS, INFERENCE_BACKENDS, LANGUAGES, SECRET_MASK, MAX_RELAY_URLS, redactSettings, relayUrls } from './settings.ts'
export type { Settings, SettingKey, SettingsChange } from './settings.ts'
export { FALSE_WORDS, TRUE_WORDS, describeSettings, parseBooleanWord, settingFromText } from './setting-text.ts'
export type { SettingDescription } from './setting-text.ts'
