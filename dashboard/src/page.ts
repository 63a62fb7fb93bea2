// What every page of the dashboard is given by the app around it.
import type { AppSnapshot } from '../../src/http/schemas/app.ts'

export interface PageProps {
  snapshot: AppSnapshot
  /** Reads the snapshot again (after an action that changes it). */
  refresh: () => void
}
