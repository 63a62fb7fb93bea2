export { SettingsStore, SettingsPatch, DEFAULT_SETTINGS, INFERENCE_BACKENDS, LANGUAGES } from './settings.ts'
export type { Settings, SettingKey, SettingsChange } from './settings.ts'
