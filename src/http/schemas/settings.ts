import { z } from 'zod'
import { INFERENCE_BACKENDS, LANGUAGES } from '../../settings/index.ts'

/** The full settings object, as every response carries it. */
export const SettingsObject = z.object({
  cluster_enabled: z.boolean(),
  wan_enabled: z.boolean(),
  wan_relay_url: z.string(),
  max_storage_gb: z.number(),
  org_capacity_reservation: z.number(),
  cluster_passcode: z.string(),
  allow_network_access: z.boolean(),
  electricity_cost: z.number(),
  electricity_currency: z.string(),
  electricity_margin: z.number(),
  keep_awake: z.boolean(),
  auto_manage_models: z.boolean(),
  inference_backend: z.enum(INFERENCE_BACKENDS),
  language: z.enum(LANGUAGES),
  solana_rpc_url: z.string()
})
export type SettingsObject = z.infer<typeof SettingsObject>
