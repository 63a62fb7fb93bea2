export { SettingsStore, SettingsPatch, DEFAULT_SETTINGS, INFERENCE_BACKENDS, LANGUAGES, SECRET_MASK, redactSettings } from './settings.ts'
export type { Settings, SettingKey, SettingsChange } from './settings.ts'
